#include "voxfit/train/precision.h"

#include <ATen/Context.h>

#include "voxfit/core/error.h"

namespace voxfit::train {

Precision parse_precision(const std::string& text) {
  // voxfit's names, PyTorch's dtype names and Lightning's (16-mixed, bf16-mixed, 32-true): training
  // fp16 / bf16 is always mixed precision (autocast, fp32 weights), as MONAI's and nnU-Net's is.
  if (text == "fp32" || text == "float32" || text == "32" || text == "32-true") return Precision::kFp32;
  if (text == "tf32") return Precision::kTf32;
  if (text == "fp16" || text == "float16" || text == "half" || text == "16-mixed" || text == "16")
    return Precision::kFp16;
  if (text == "bf16" || text == "bfloat16" || text == "bf16-mixed") return Precision::kBf16;
  throw ConfigError("--precision: '" + text + "' is not one of fp32, tf32, fp16 (16-mixed), bf16 (bf16-mixed)");
}

std::string to_string(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kTf32:
      return "tf32";
    case Precision::kFp16:
      return "fp16";
    case Precision::kBf16:
      return "bf16";
  }
  return "?";
}

c10::ScalarType autocast_dtype(Precision p) {
  if (p == Precision::kFp16) return c10::kHalf;
  if (p == Precision::kBf16) return c10::kBFloat16;
  return c10::kFloat;
}

bool uses_autocast(Precision p) { return p == Precision::kFp16 || p == Precision::kBf16; }
bool uses_loss_scaling(Precision p) { return p == Precision::kFp16; }

void apply_math_mode(Precision p) {
  // Mixed precision runs keep TF32 for the few float32 convolutions/matmuls left, as PyTorch does.
  const bool tf32 = p != Precision::kFp32;
  at::globalContext().setAllowTF32CuBLAS(tf32);
  at::globalContext().setAllowTF32CuDNN(tf32);
  // Patch shapes are fixed within a run, so cuDNN's autotuning pays for itself (as in nnU-Net).
  at::globalContext().setBenchmarkCuDNN(true);
}

}  // namespace voxfit::train
