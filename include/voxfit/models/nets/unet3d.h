#pragma once
// nnU-Net v2's 3d_fullres PlainConvUNet (MIC-DKFZ/dynamic-network-architectures).
#include <torch/arg.h>
#include <torch/nn/modules/container/any.h>
#include <torch/types.h>

#include <string>
#include <vector>

#include "voxfit/models/blocks/conv_blocks.h"
#include "voxfit/models/network.h"

namespace voxfit::models {

/// Defaults: the 3d_fullres plan for a 1-channel, 14-class task (31,205,254 parameters).
struct UNet3DOptions {
  TORCH_ARG(int64_t, in_channels) = 1;
  TORCH_ARG(int64_t, num_classes) = 14;
  /// Resolution stages; the encoder halves the resolution stages-1 times.
  TORCH_ARG(int64_t, stages) = 6;
  /// Features of stage 0; each deeper stage doubles them up to max_features (32-64-128-256-320-320).
  TORCH_ARG(int64_t, base_features) = 32;
  TORCH_ARG(int64_t, max_features) = 320;
  /// Conv-norm-LeakyReLU units per encoder and per decoder stage.
  TORCH_ARG(int64_t, convs_per_stage) = 2;
  /// In training, also return the 1x1x1 head's logits of every lower decoder stage.
  TORCH_ARG(bool, deep_supervision) = true;
  /// A make_norm name (nnU-Net: affine InstanceNorm).
  TORCH_ARG(std::string, norm) = "instance_affine";
  /// `blocks`: each encoder stage; `all`: decoder stages too.
  TORCH_ARG(CheckpointMode, checkpoint) = CheckpointMode::kNone;
  TORCH_ARG(bool, channels_last) = false;
};

/// PlainConvUNet: encoder stages of ConvStack (stride 1 first, then a stride-2 first conv),
/// decoder stages of ConvTranspose3d (kernel = stride = 2, with bias) + concatenated skip +
/// ConvStack(2C -> C), a 1x1x1 segmentation head after every decoder stage; He(a=0.01) init.
///
/// Input constraints: [B, in_channels, D, H, W] with D, H, W divisible by 2^(stages-1).
class UNet3DImpl : public NetworkImpl {
 public:
  explicit UNet3DImpl(const UNet3DOptions& options = {});
  std::vector<torch::Tensor> forward(const torch::Tensor& x) override;
  TaskKind task() const override { return TaskKind::kSegmentation3d; }
  void check_input(const std::vector<int64_t>& shape) const override;
  std::vector<std::vector<int64_t>> output_shapes(const std::vector<int64_t>& input_shape) override;

  const UNet3DOptions& options() const { return options_; }

 private:
  UNet3DOptions options_;
  std::vector<ConvStack> encoder_, decoder_;
  std::vector<torch::nn::AnyModule> upsample_, heads_;
};
TORCH_MODULE(UNet3D);

}  // namespace voxfit::models
