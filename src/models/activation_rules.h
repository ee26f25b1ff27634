#pragma once
// The op rules of memory_estimate.h, for the networks' own NetworkImpl::saved_activations (internal
// to src/models): a Tally charges what each op keeps to the block open when it runs, and the
// shared blocks (MONAI's UnetBlock / UnetrUpBlock, the pre-norm transformer block) apply them.
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "voxfit/models/activation_estimate.h"
#include "voxfit/models/network.h"

namespace voxfit::models::rules {

using c10::ScalarType;

// Charges the tensors a forward keeps to the block open when they are made; memory_estimate.h's
// op rules, one member each.
class Tally {
 public:
  Tally(ScalarType compute, std::int64_t batch, const KernelPaths& paths) : c_(compute), batch_(batch), paths_(paths) {}

  ScalarType compute() const { return c_; }
  const KernelPaths& paths() const { return paths_; }
  bool autocast() const { return c_ != c10::kFloat; }
  std::int64_t batch() const { return batch_; }

  void block(const std::string& name) { est_.blocks.push_back({name, {}, 0, 0, 0}); }

  // A new tensor of `elements` per sample that stays live until the block ends.
  void keep(std::int64_t elements, ScalarType dtype) {
    const std::int64_t bytes = batch_ * elements * static_cast<std::int64_t>(c10::elementSize(dtype));
    auto& block = est_.blocks.back();
    block.bytes[dtype_name(dtype)] += bytes;
    block.largest = std::max(block.largest, bytes);
    est_.largest_tensor = std::max(est_.largest_tensor, bytes);
  }
  // One that is not batched (autocast's weight copies).
  void keep_unbatched(std::int64_t elements, ScalarType dtype) {
    est_.blocks.back().bytes[dtype_name(dtype)] += elements * static_cast<std::int64_t>(c10::elementSize(dtype));
  }

  // Convolution or linear layer of `weights` parameters reading `in` elements of dtype `in_dtype`:
  // under autocast the weights' copy and a cast of the input; the output (`out` elements of the
  // compute dtype) is the caller's to keep or not. Returns the output dtype.
  ScalarType matmul_layer(std::int64_t weights, std::int64_t in, ScalarType in_dtype) {
    est_.blocks.back().parameters += weights;
    if (autocast()) {
      keep_unbatched(weights, c_);
      if (in_dtype != c_) keep(in, c_);
    }
    return c_;
  }
  // Instance norm over `channels`: per (sample, channel) statistics and, affine, the weight
  // repeated per sample (batch_norm's backward reads it; the repeated bias is freed).
  void instance_norm(std::int64_t channels, bool affine) { keep((affine ? 3 : 2) * channels, c10::kFloat); }
  // Layer norm over `rows` rows: mean and rstd per row; the output is the caller's.
  void layer_norm(std::int64_t rows) { keep(2 * rows, c10::kFloat); }
  // The dtype in which a layer norm of an `input` tensor keeps it for backward and returns its
  // output: ATen under autocast casts to float32; kernels::layer_norm (the transformers' norms on the
  // fused path) keeps and returns the input's dtype. A float32 input stays float32 either way.
  ScalarType layer_norm_dtype(ScalarType input) const {
    return autocast() && !paths_.fused_kernels ? c10::kFloat : input;
  }

  void output(std::int64_t elements, ScalarType dtype) {
    keep(elements, dtype);
    est_.outputs[dtype_name(dtype)] += batch_ * elements * static_cast<std::int64_t>(c10::elementSize(dtype));
  }

  ActivationEstimate finish() { return std::move(est_); }

 private:
  ScalarType c_;
  std::int64_t batch_;
  KernelPaths paths_;
  ActivationEstimate est_;
};

std::int64_t conv_weights(std::int64_t in, std::int64_t out, std::int64_t kernel, bool bias);

// Where an instance norm's output goes: to the next convolution (which keeps it), into a later
// residual add as its residual (a projection), or into the residual add that follows it.
enum class NormOut { kKept, kResidual, kIntoAdd };

// conv + instance norm + in-place activation at `voxels` (per sample), reading `in` channels at
// `in_voxels` of `in_dtype`. ATen's norm keeps its input (the conv output); the norm output stays
// where the next conv keeps it; the add after a norm keeps nothing (its output, activated in
// place, is the caller's to count). The fused norm (kernels::instance_norm_act) without affine
// parameters keeps its output instead of its input, and with a residual the residual (counted
// where it was made): then the conv output is never kept, and a projection's output is.
void conv_norm_act(Tally& t, std::int64_t in, std::int64_t out, std::int64_t in_voxels, std::int64_t voxels,
                   ScalarType in_dtype, std::int64_t kernel, bool bias, bool affine,
                   NormOut norm_out = NormOut::kKept);
// The same for a convolution of `weights` parameters of any kernel shape (per-axis kernels).
void conv_norm_act_weights(Tally& t, std::int64_t weights, std::int64_t in, std::int64_t out, std::int64_t in_voxels,
                           std::int64_t voxels, ScalarType in_dtype, bool affine, NormOut norm_out = NormOut::kKept);

// MONAI's UnetResBlock / UnetBasicBlock (models::UnetBlock), in -> out channels at `voxels`.
// Returns its output's dtype: the add of an unprojected input of another dtype promotes.
ScalarType unet_block(Tally& t, std::int64_t in, std::int64_t out, std::int64_t voxels, ScalarType in_dtype,
                      bool residual);

// MONAI's UnetrUpBlock: a transposed conv (x2) of `in` channels of `in_dtype` to `out` at `voxels`,
// concatenated with a skip of `skip_dtype` (cat promotes), then UnetBlock(2 out -> out). The
// transposed conv's output goes into the concatenation only; the concatenation stays.
ScalarType up_block(Tally& t, std::int64_t in, std::int64_t out, std::int64_t voxels, ScalarType in_dtype,
                    ScalarType skip_dtype, bool residual);

// A pre-norm layer norm over `tokens` rows whose input has the residual stream's dtype: ATen under
// autocast runs it in float32, so a half-precision input is cast first and the cast is what it
// saves. kernels::layer_norm (every transformer's norms on the fused path) keeps the input as given,
// which the caller counts as the stream's.
void pre_norm(Tally& t, std::int64_t tokens, std::int64_t hidden, ScalarType stream);

// A linear layer reading a float32 layer-norm output of `in` elements: the output itself is what
// it saves, or under autocast its cast copy.
void linear_after_norm(Tally& t, std::int64_t weights, std::int64_t in);

// Attention of `queries` tokens each over `keys` tokens (windows: keys = window tokens), from the
// first norm's output through the output projection. `bias_elements`: an additive bias the fused
// kernel keeps (unbatched; 0 for none).
void attention_half(Tally& t, std::int64_t queries, std::int64_t keys, std::int64_t hidden, std::int64_t heads,
                    bool qkv_bias, AttentionMode attention, std::int64_t bias_elements);

// x + attention, then the pre-norm MLP and its residual add; both sums in the stream's dtype.
void mlp_half(Tally& t, std::int64_t tokens, std::int64_t hidden, std::int64_t mlp, ScalarType stream);

// One pre-norm transformer block on `tokens` x `hidden` float32 tokens (UNETR's ViT).
void transformer_block(Tally& t, std::int64_t tokens, std::int64_t hidden, std::int64_t mlp, std::int64_t heads,
                       bool qkv_bias, AttentionMode attention);

}  // namespace voxfit::models::rules
