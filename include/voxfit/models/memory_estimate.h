#pragma once
// The activations a training forward saves for backward, predicted from the network's architecture,
// the input shape and the autocast dtype alone (nothing runs): per top-level block, under the same
// names the networks give their blocks (core::BlockScope), so that a prediction lines up with what
// the memory tracker measures around each block.
//
// What a block is charged, as the tracker measures it: the tensors it creates that are still live
// when it ends (saved for backward by some op, or returned), each counted once, in the block that
// created it. Its input belongs to the block before (or to the batch).
//
// The rules (one per op; `c` is the compute dtype: the autocast dtype, else float32):
// - convolution / transposed convolution / linear: saves its input and weight; its output is a new
//   `c` tensor. Under autocast the weight's `c` copy (autocast's cache) is saved too, and an input
//   of another dtype is cast to `c` first: a new tensor, saved.
// - instance norm (ATen: batch_norm over [1, B*C, ...]): saves its input, and per (sample, channel)
//   a float32 mean and inverse std; affine: the weight repeated per sample (float32; the repeated
//   bias is not saved); the output is a new tensor of the input's dtype (no autocast rule applies).
// - layer norm: autocast runs it in float32 (a half input is cast first, and the cast is what it
//   saves): saves its input and per row a float32 mean and rstd; output float32 (cast again to
//   `c` by the linear that reads it).
// - leaky ReLU / ReLU after a norm or residual add: in place, saves its output (no new tensor).
// - GELU: saves its input; output new (`c`).
// - add / cat / view / permute: save nothing; cat and add outputs are new tensors (a float32 and a
//   half operand make float32), a contiguous copy of a permuted tensor is a new tensor.
// - math attention: saves the scaled queries, the keys and values (views of the qkv output, which
//   therefore stays), the softmax output (float32 under autocast: softmax is on its float32 list)
//   and the output copy [B, L, C] the projection reads; Swin windows attend within n tokens, so
//   the softmax output is [windows, heads, n, n]. SDPA (LibTorch 2.x): q, k, v (views of the qkv
//   output, which stays), the output, its log-sum-exp, and an additive bias in `c` (Swin's relative
//   position bias plus the shift mask, one copy for all samples).
// - Swin: the shifted-window masks (float32 [windows, n, n]) are made by the first forward and
//   cached by the module; they are charged to swin_vit, as the tracker's largest step (the first)
//   sees them. The residual stream is in `c` (UNETR's is float32: its position embedding is).
// - checkpointed blocks keep only their outputs (the input is the block before's).
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "voxfit/models/network.h"

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

/// The saved activations of a training forward of `net` (training mode, its own checkpointing) on
/// an input of `input_shape` ([B, C, D, H, W]) under autocast to `compute` (kFloat: no autocast).
/// Throws UnsupportedError for networks without an analytic model (the 2D classifiers, SwinUNETR-v2) and
/// ModelError for an input the network does not accept.
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

ActivationEstimate estimate_activations(const NetworkImpl& net, const std::vector<std::int64_t>& input_shape,
                                        c10::ScalarType compute = c10::kFloat, const KernelPaths& paths = {});

}  // namespace voxfit::models
