#pragma once
// Swin UNETR (Hatamizadeh et al. 2022) as MONAI 1.3 builds it: a 3D Swin Transformer encoder
// (patch 2, window 7) whose five hidden states feed a UNETR-style convolutional decoder.
#include <torch/arg.h>
#include <torch/nn/modules/container/any.h>
#include <torch/types.h>

#include <string>
#include <vector>

#include "voxfit/models/blocks/conv_blocks.h"
#include "voxfit/models/blocks/swin.h"
#include "voxfit/models/network.h"

namespace voxfit::models {

/// Defaults: feature size 48, 1 channel in, 14 out (62,187,296 parameters; 72,762,656 with use_v2).
struct SwinUNETROptions {
  TORCH_ARG(int64_t, in_channels) = 1;
  TORCH_ARG(int64_t, num_classes) = 14;
  /// Embedding width (stage i: feature_size * 2^i); a multiple of 12 as MONAI requires.
  TORCH_ARG(int64_t, feature_size) = 48;
  TORCH_ARG(std::vector<int64_t>, depths) = std::vector<int64_t>{2, 2, 2, 2};
  TORCH_ARG(std::vector<int64_t>, num_heads) = std::vector<int64_t>{3, 6, 12, 24};
  TORCH_ARG(int64_t, window_size) = 7;
  TORCH_ARG(double, mlp_ratio) = 4.0;
  TORCH_ARG(bool, qkv_bias) = true;
  /// Layer-normalise the encoder's hidden states before the decoder (MONAI's `normalize`).
  TORCH_ARG(bool, normalize) = true;
  /// SwinUNETR-v2: a residual conv block before each Swin stage.
  TORCH_ARG(bool, use_v2) = false;
  /// A make_norm name for the conv blocks (MONAI's "instance": no affine parameters).
  TORCH_ARG(std::string, norm) = "instance";
  TORCH_ARG(AttentionMode, attention) = AttentionMode::kAuto;
  /// `blocks`: each Swin block; `all`: every conv block, v2 block and patch merging too.
  TORCH_ARG(CheckpointMode, checkpoint) = CheckpointMode::kNone;
  TORCH_ARG(bool, channels_last) = false;
};

/// Input constraints: [B, in_channels, D, H, W] with D, H, W divisible by 32 (patch 2, then four
/// patch mergings); any such size works, there is no absolute position embedding.
class SwinUNETRImpl : public NetworkImpl {
 public:
  explicit SwinUNETRImpl(const SwinUNETROptions& options = {});
  std::vector<torch::Tensor> forward(const torch::Tensor& x) override;
  TaskKind task() const override { return TaskKind::kSegmentation3d; }
  void check_input(const std::vector<int64_t>& shape) const override;
  std::vector<std::vector<int64_t>> output_shapes(const std::vector<int64_t>& input_shape) override;

  const SwinUNETROptions& options() const { return options_; }

 private:
  SwinUNETROptions options_;
  SwinTransformer swin_{nullptr};
  UnetBlock encoder1_{nullptr}, encoder2_{nullptr}, encoder3_{nullptr}, encoder4_{nullptr}, encoder10_{nullptr};
  UnetrUpBlock decoder5_{nullptr}, decoder4_{nullptr}, decoder3_{nullptr}, decoder2_{nullptr}, decoder1_{nullptr};
  torch::nn::AnyModule out_;
};
TORCH_MODULE(SwinUNETR);

}  // namespace voxfit::models
