#pragma once
// Numeric precision of a training run and what it switches on.
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <string>

namespace voxfit::train {

enum class Precision {
  kFp32,  ///< float32 everywhere; TF32 off for matmul and cuDNN (strict)
  kTf32,  ///< float32 storage, TF32 tensor-core math for matmul and cuDNN
  kFp16,  ///< autocast to float16 + dynamic loss scaling
  kBf16,  ///< autocast to bfloat16, no loss scaling
};

/// "fp32", "tf32", "fp16", "bf16" (also "float32", "float16", "bfloat16"); ConfigError otherwise.
Precision parse_precision(const std::string& text);
std::string to_string(Precision p);

/// The autocast dtype, or float32 when the precision does not autocast.
c10::ScalarType autocast_dtype(Precision p);
bool uses_autocast(Precision p);
bool uses_loss_scaling(Precision p);

/// Applies the global math settings for `p` (TF32 on/off; cuDNN autotuning on); process-wide, like
/// PyTorch's flags.
void apply_math_mode(Precision p);

}  // namespace voxfit::train
