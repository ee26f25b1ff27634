#pragma once
// timm's vit_base_patch16_224: ViT-B/16 with a class token, pre-norm blocks, qkv bias, LayerNorm eps 1e-6.
#include <torch/arg.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/types.h>

#include <vector>

#include "voxfit/models/blocks/transformer.h"
#include "voxfit/models/network.h"
#include "voxfit/models/params.h"

namespace voxfit::models {

/// Defaults: timm's vit_base_patch16_224 (86,567,656 parameters).
/// The settable parameters (params.h): X(type, name, default, help).
#define VOXFIT_VIT_PARAMS(X)                                                      \
  X(int64_t, patch_size, 16, "ViT patch size (square)")                           \
  X(int64_t, hidden_size, 768, "transformer token width")                         \
  X(int64_t, mlp_dim, 3072, "transformer MLP width")                              \
  X(int64_t, num_heads, 12, "attention heads (per stage for swin_unetr)")         \
  X(int64_t, num_layers, 12, "transformer layers")                                \
  X(bool, qkv_bias, true, "bias on the attention q/k/v projection")

struct VisionTransformerOptions {
  TORCH_ARG(int64_t, in_channels) = 3;
  TORCH_ARG(int64_t, num_classes) = 1000;
  /// Input size (H, W) the position embedding is built for, multiples of patch_size.
  TORCH_ARG(std::vector<int64_t>, img_size) = std::vector<int64_t>{224, 224};
  VOXFIT_PARAMS(VisionTransformerOptions, VOXFIT_VIT_PARAMS)
  TORCH_ARG(AttentionMode, attention) = AttentionMode::kAuto;
  /// `blocks`: each transformer block; `all`: the patch embedding too.
  TORCH_ARG(CheckpointMode, checkpoint) = CheckpointMode::kNone;
  TORCH_ARG(bool, channels_last) = false;
};

/// Input constraints: [B, in_channels, H, W] with (H, W) == img_size.
class VisionTransformerImpl : public NetworkImpl {
 public:
  explicit VisionTransformerImpl(const VisionTransformerOptions& options = {});
  std::vector<torch::Tensor> forward(const torch::Tensor& x) override;
  TaskKind task() const override { return TaskKind::kClassification2d; }
  void check_input(const std::vector<int64_t>& shape) const override;
  std::vector<std::vector<int64_t>> output_shapes(const std::vector<int64_t>& input_shape) override;

  const VisionTransformerOptions& options() const { return options_; }

 private:
  VisionTransformerOptions options_;
  torch::nn::Conv2d patch_embed_{nullptr};
  torch::Tensor cls_token_, pos_embed_;
  std::vector<TransformerBlock> blocks_;
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(VisionTransformer);

}  // namespace voxfit::models
