#pragma once
// nnU-Net v2's 3d_fullres PlainConvUNet (MIC-DKFZ/dynamic-network-architectures).
#include <torch/arg.h>
#include <torch/nn/modules/container/any.h>
#include <torch/types.h>

#include <string>
#include <vector>

#include "voxfit/models/blocks/conv_blocks.h"
#include "voxfit/models/network.h"
#include "voxfit/models/params.h"

namespace voxfit::models {

/// The settable parameters (params.h): X(type, name, default, help).
#define VOXFIT_UNET3D_PARAMS(X)                                                                                     \
  X(int64_t, stages, 6, "resolution stages of the UNet (input divisible by 2^(stages-1))")                          \
  X(int64_t, base_features, 32, "features of the first UNet stage, doubled per stage")                              \
  X(int64_t, max_features, 320, "cap on the UNet's features per stage")                                             \
  X(int64_t, convs_per_stage, 2, "conv-norm-LeakyReLU units per UNet stage")                                        \
  X(bool, deep_supervision, true, "UNet returns every decoder stage's logits while training")                       \
  X(std::string, norm_name, "instance_affine", "normalisation: instance, instance_affine, batch or none")

/// Defaults: the 3d_fullres plan for a 1-channel, 14-class task (31,205,254 parameters): stages
/// 32-64-128-256-320-320 (each doubles base_features up to max_features), two conv-norm-LeakyReLU
/// units per encoder and decoder stage, deep supervision, nnU-Net's affine InstanceNorm.
struct UNet3DOptions {
  TORCH_ARG(int64_t, in_channels) = 1;
  TORCH_ARG(int64_t, num_classes) = 14;
  VOXFIT_PARAMS(UNet3DOptions, VOXFIT_UNET3D_PARAMS)
  /// `blocks`: each encoder stage; `all`: decoder stages too.
  TORCH_ARG(CheckpointMode, checkpoint) = CheckpointMode::kNone;
  TORCH_ARG(bool, channels_last) = false;

 public:  // (TORCH_ARG leaves the access private)
  /// The encoder halves the resolution stages-1 times: at least 2 stages.
  static int64_t minimum(const std::string& name) { return name == "stages" ? 2 : 1; }
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
  std::optional<ActivationEstimate> saved_activations(const std::vector<int64_t>& input_shape, c10::ScalarType compute,
                                                      const KernelPaths& paths,
                                                      std::optional<CheckpointMode> recompute) const override;

  const UNet3DOptions& options() const { return options_; }

 private:
  UNet3DOptions options_;
  std::vector<ConvStack> encoder_, decoder_;
  std::vector<torch::nn::AnyModule> upsample_, heads_;
};
TORCH_MODULE(UNet3D);

}  // namespace voxfit::models
