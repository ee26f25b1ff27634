#pragma once
// UNETR (Hatamizadeh et al. 2022) as MONAI 1.3 builds it: a ViT encoder on 16^3 patches whose
// hidden states feed a convolutional decoder through skip connections.
#include <torch/arg.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/normalization.h>
#include <torch/types.h>

#include <string>
#include <vector>

#include "voxfit/models/blocks/conv_blocks.h"
#include "voxfit/models/blocks/transformer.h"
#include "voxfit/models/network.h"
#include "voxfit/models/params.h"

namespace voxfit::models {

/// Defaults: MONAI 1.3's UNETR at 96^3, 1 channel in, 14 out (92,784,046 parameters).
/// The settable parameters (params.h): X(type, name, default, help).
#define VOXFIT_UNETR_PARAMS(X)                                                                               \
  X(int64_t, feature_size, 16, "decoder / embedding width of the net (x2, x4, x8 deeper)")                   \
  X(int64_t, hidden_size, 768, "transformer token width")                                                    \
  X(int64_t, mlp_dim, 3072, "transformer MLP width")                                                         \
  X(int64_t, num_heads, 12, "attention heads (per stage for swin_unetr)")                                    \
  X(int64_t, num_layers, 12,                                                                                 \
    "transformer layers, at least 4; the skips take layers L/4, L/2, 3L/4 (MONAI's 3, 6, 9 of 12)")         \
  X(bool, qkv_bias, false, "bias on the attention q/k/v projection (MONAI 1.3's UNETR: none)")               \
  X(std::string, norm_name, "instance", "normalisation: instance, instance_affine, batch or none")            \
  X(bool, res_block, true, "residual (true) or plain decoder conv blocks")

struct UNETROptions {
  TORCH_ARG(int64_t, in_channels) = 1;
  TORCH_ARG(int64_t, num_classes) = 14;
  /// Input size the learned position embedding is built for (each a multiple of 16).
  TORCH_ARG(std::vector<int64_t>, img_size) = std::vector<int64_t>{96, 96, 96};
  VOXFIT_PARAMS(UNETROptions, VOXFIT_UNETR_PARAMS)
  TORCH_ARG(AttentionMode, attention) = AttentionMode::kAuto;
  /// `blocks`: each transformer layer; `all`: every decoder block too.
  TORCH_ARG(CheckpointMode, checkpoint) = CheckpointMode::kNone;
  TORCH_ARG(bool, channels_last) = false;
};

/// Input constraints: [B, in_channels, D, H, W] with (D, H, W) == img_size, which must be
/// divisible by 16 (the patch size, which the decoder's four x2 upsamplings undo).
class UNETRImpl : public NetworkImpl {
 public:
  static constexpr int64_t kPatch = 16;

  explicit UNETRImpl(const UNETROptions& options = {});
  std::vector<torch::Tensor> forward(const torch::Tensor& x) override;
  TaskKind task() const override { return TaskKind::kSegmentation3d; }
  void check_input(const std::vector<int64_t>& shape) const override;
  std::vector<std::vector<int64_t>> output_shapes(const std::vector<int64_t>& input_shape) override;
  std::optional<ActivationEstimate> saved_activations(const std::vector<int64_t>& input_shape, c10::ScalarType compute,
                                                      const KernelPaths& paths,
                                                      std::optional<CheckpointMode> recompute) const override;

  const UNETROptions& options() const { return options_; }

 private:
  torch::Tensor tokens_to_volume(const torch::Tensor& tokens) const;

  UNETROptions options_;
  std::vector<int64_t> grid_;
  torch::nn::Conv3d patch_embed_{nullptr};
  torch::Tensor pos_embed_;
  std::vector<TransformerBlock> blocks_;
  torch::nn::LayerNorm norm_{nullptr};
  UnetBlock encoder1_{nullptr};
  UnetrPrUpBlock encoder2_{nullptr}, encoder3_{nullptr}, encoder4_{nullptr};
  UnetrUpBlock decoder5_{nullptr}, decoder4_{nullptr}, decoder3_{nullptr}, decoder2_{nullptr};
  torch::nn::AnyModule out_;
};
TORCH_MODULE(UNETR);

}  // namespace voxfit::models
