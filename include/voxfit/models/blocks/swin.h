#pragma once
// The 3D Swin Transformer encoder of MONAI 1.3's SwinUNETR: patch embedding, four stages of
// (shifted-)window attention blocks with relative position bias, each ending in patch merging.
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <array>
#include <map>
#include <string>
#include <vector>

#include "voxfit/models/blocks/conv_blocks.h"
#include "voxfit/models/blocks/transformer.h"
#include "voxfit/models/network.h"

namespace voxfit::models {

using Size3 = std::array<int64_t, 3>;

/// MONAI's get_window_size: along an axis no longer than the window, the window shrinks to the
/// axis and the shift becomes 0. Returns {window, shift}.
std::pair<Size3, Size3> window_and_shift(const Size3& size, const Size3& window, const Size3& shift);

/// The shifted-window attention mask for a padded [dp, hp, wp] map: [windows, n, n] with 0 between
/// tokens of one region and -100 across regions (MONAI's compute_mask).
torch::Tensor shifted_window_mask(const Size3& padded, const Size3& window, const Size3& shift,
                                  const torch::Device& device);

/// Where each token goes between a [B, D, H, W, C] map and its windows [B * windows, n, C] (zero
/// padding to whole windows, the cyclic shift by -shift, windows in raster order), as index lists
/// on the map's device: for window position p, `source[p]` is the map's token (row-major over
/// D, H, W) or 0 for a padding position (listed in `padding`); `window_of[t]` is token t's window
/// position. Both moves are then one gather each, forward and backward.
struct WindowOrder {
  torch::Tensor source, padding, window_of;
};
WindowOrder window_order(const Size3& size, const Size3& window, const Size3& shift, const torch::Device& device);

/// [B, D*H*W, C] -> [B, windows * n, C] in the order of `order` (padding positions zero), and
/// back; each is the other's gradient. The same values as MONAI's pad, roll and window partition
/// (and window reverse, roll back and crop), two copies instead of six a block and direction.
torch::Tensor to_windows(const torch::Tensor& tokens, const WindowOrder& order);
torch::Tensor from_windows(const torch::Tensor& windows, const WindowOrder& order);

/// Window attention with a learned relative position bias ((2w-1)^3 x heads table).
class WindowAttentionImpl : public torch::nn::Module {
 public:
  WindowAttentionImpl(int64_t dim, int64_t heads, const Size3& window, bool qkv_bias, AttentionMode mode);
  /// x: [B * windows, n, C]; mask: [windows, n, n] or undefined.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);

 private:
  int64_t heads_;
  AttentionMode mode_;
  torch::Tensor table_, index_;
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr};
};
TORCH_MODULE(WindowAttention);

/// One Swin block on [B, D, H, W, C]: x + window_attention(norm1(x)) with the optional cyclic
/// shift, then x + mlp(norm2(x)).
class SwinBlockImpl : public torch::nn::Module {
 public:
  SwinBlockImpl(int64_t dim, int64_t heads, const Size3& window, const Size3& shift, double mlp_ratio, bool qkv_bias,
                AttentionMode mode);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);

 private:
  Size3 window_, shift_;
  /// window_order of the input sizes seen (built once per size and device, so a CUDA graph
  /// capture finds them on the device).
  std::map<Size3, WindowOrder> orders_;
  torch::nn::LayerNorm norm1_{nullptr}, norm2_{nullptr};
  WindowAttention attn_{nullptr};
  Mlp mlp_{nullptr};
};
TORCH_MODULE(SwinBlock);

/// MONAI 1.5's PatchMerging ("merging"): the 2x2x2 neighbours concatenated in its order, LayerNorm(8C),
/// Linear(8C -> 2C) without bias. [B, D, H, W, C] -> [B, D/2, H/2, W/2, 2C].
class PatchMergingImpl : public torch::nn::Module {
 public:
  explicit PatchMergingImpl(int64_t dim);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Linear reduction_{nullptr};
};
TORCH_MODULE(PatchMerging);

struct SwinTransformerOptions {
  TORCH_ARG(int64_t, in_channels) = 1;
  /// Channels after the patch embedding; stage i has embed_dim * 2^i.
  TORCH_ARG(int64_t, embed_dim) = 48;
  /// Attention window (cubic); shrinks to the feature map where the map is smaller.
  TORCH_ARG(int64_t, window_size) = 7;
  /// Blocks per stage (4 stages).
  TORCH_ARG(std::vector<int64_t>, depths) = std::vector<int64_t>{2, 2, 2, 2};
  /// Attention heads per stage.
  TORCH_ARG(std::vector<int64_t>, num_heads) = std::vector<int64_t>{3, 6, 12, 24};
  /// MLP width over channel width.
  TORCH_ARG(double, mlp_ratio) = 4.0;
  TORCH_ARG(bool, qkv_bias) = true;
  /// Layer-normalise each hidden state handed to the decoder (MONAI's `normalize`).
  TORCH_ARG(bool, normalize) = true;
  /// SwinUNETR-v2: a residual conv block (UnetBlock) before each stage.
  TORCH_ARG(bool, use_v2) = false;
  TORCH_ARG(AttentionMode, attention) = AttentionMode::kAuto;
  /// Checkpoint each Swin block.
  TORCH_ARG(bool, checkpoint_blocks) = false;
  /// Checkpoint each v2 conv block and patch merging too.
  TORCH_ARG(bool, checkpoint_rest) = false;
};

/// Returns the five hidden states [embedding, stage 1..4], each [B, C_i, D/2^(i+1), ...].
class SwinTransformerImpl : public torch::nn::Module {
 public:
  explicit SwinTransformerImpl(const SwinTransformerOptions& options);
  std::vector<torch::Tensor> forward(const torch::Tensor& x);

 private:
  torch::Tensor run_stage(size_t stage, const torch::Tensor& x);

  SwinTransformerOptions options_;
  torch::nn::Conv3d patch_embed_{nullptr};
  std::vector<std::vector<SwinBlock>> blocks_;
  std::vector<PatchMerging> merging_;
  std::vector<UnetBlock> v2_blocks_;
  // Shifted-window masks by (padded size, window, shift, device): a mask depends on the input's
  // shape only, and building one is [windows, n, n] work (40 M elements at 96^3) every forward.
  std::map<std::string, torch::Tensor> masks_;
};
TORCH_MODULE(SwinTransformer);

}  // namespace voxfit::models
