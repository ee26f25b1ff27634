#pragma once
// What a training forward keeps for backward, as a network predicts it (NetworkImpl::
// saved_activations; the rules are in memory_estimate.h): bytes per dtype per top-level block.
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace voxfit::models {

/// Bytes per dtype name ("float32", "float16", "bfloat16", "int64", "bool").
using DtypeByteCounts = std::map<std::string, std::int64_t>;
std::int64_t total_bytes(const DtypeByteCounts& bytes);
/// "float32", "float16", ... (the names memory::bytes_by_dtype uses).
std::string dtype_name(c10::ScalarType dtype);

/// What one top-level block leaves live when it ends.
struct BlockActivations {
  std::string name;  ///< "encoder0", "transformer3", "out", ...
  DtypeByteCounts bytes;
  /// A checkpointed block: what its recomputation in backward makes again (all it would keep
  /// unchecked, output included); 0 for a block that is not checkpointed.
  std::int64_t recomputed = 0;
  /// The largest single tensor it keeps (without checkpointing), bytes.
  std::int64_t largest = 0;
  /// Weights and biases of its convolutions and linear layers (elements): what backward makes
  /// gradients for once it has passed the block.
  std::int64_t parameters = 0;
  std::int64_t total() const { return total_bytes(bytes); }
};

struct ActivationEstimate {
  std::vector<BlockActivations> blocks;  ///< in forward order
  /// The network's outputs (logits; deep-supervision heads too), part of their blocks above: what a
  /// loss that keeps none of them frees when the forward ends.
  DtypeByteCounts outputs;
  /// The largest single activation tensor (bytes) of the forward without checkpointing: the scale
  /// of backward's transient gradients.
  std::int64_t largest_tensor = 0;
  std::int64_t total() const;
};

/// Which of voxfit's CUDA paths the forward runs (--kernels fused, --lean-decoders on, on a GPU).
struct KernelPaths {
  /// voxfit's fused CUDA kernels run: an instance norm without affine parameters or ReLU keeps its
  /// output (and a residual added after it), not the convolution output before it
  /// (kernels::instance_norm_act); the loss keeps the outputs and per-sample sums only
  /// (kernels::dice_ce_fused, counted by train::predict_step_memory); SwinUNETR's layer norms keep
  /// their input as given and return its dtype (kernels::layer_norm), not a float32 cast.
  bool fused_kernels = false;
  /// A decoder keeps its upsampled input instead of the concatenation: kernels::convs_of_concat.
  bool lean_decoders = false;
};

}  // namespace voxfit::models
