#pragma once
// ResNet-50 v1.5 as timm and torchvision build it: bottlenecks with the stride on the 3x3 conv.
#include <torch/arg.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <vector>

#include "voxfit/models/network.h"
#include "voxfit/models/params.h"

namespace voxfit::models {

/// 1x1 reduce, 3x3 (strided), 1x1 expand (x4), each with BatchNorm; projection shortcut where
/// the shape changes.
class BottleneckImpl : public torch::nn::Module {
 public:
  BottleneckImpl(int64_t in, int64_t width, int64_t stride);
  torch::Tensor forward(const torch::Tensor& x);
  /// timm's zero_init_last: the residual branch starts as zero, so each block starts as identity.
  void zero_init_last();
  /// See NetworkImpl::fold_for_inference.
  void fold_batch_norm();

 private:
  int64_t stride_;
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr}, down_conv_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr}, down_bn_{nullptr};
  /// Folded weight and bias of conv1..3 and the shortcut (empty until fold_batch_norm).
  std::vector<torch::Tensor> folded_;
};
TORCH_MODULE(Bottleneck);

/// Defaults: resnet50 (25,557,032 parameters).
/// The settable parameters (params.h): X(type, name, default, help).
#define VOXFIT_RESNET_PARAMS(X)                                                                                   \
  X(std::vector<int64_t>, blocks_per_stage, (std::vector<int64_t>{3, 4, 6, 3}),                                  \
    "ResNet bottlenecks per stage (4 stages; 3,4,6,3 = ResNet-50, 3,4,23,3 = ResNet-101)")                        \
  X(bool, zero_init_last, true, "zero the last BatchNorm of each bottleneck (timm init)")

struct ResNetOptions {
  TORCH_ARG(int64_t, in_channels) = 3;
  TORCH_ARG(int64_t, num_classes) = 1000;
  VOXFIT_PARAMS(ResNetOptions, VOXFIT_RESNET_PARAMS)
  /// `blocks`: each bottleneck; `all`: the stem too. BatchNorm running statistics are updated
  /// again by the recomputation.
  TORCH_ARG(CheckpointMode, checkpoint) = CheckpointMode::kNone;
  TORCH_ARG(bool, channels_last) = false;
};

/// Input constraints: [B, in_channels, H, W] with H, W >= 32 (five stride-2 steps).
class ResNetImpl : public NetworkImpl {
 public:
  explicit ResNetImpl(const ResNetOptions& options = {});
  std::vector<torch::Tensor> forward(const torch::Tensor& x) override;
  TaskKind task() const override { return TaskKind::kClassification2d; }
  void check_input(const std::vector<int64_t>& shape) const override;
  std::vector<std::vector<int64_t>> output_shapes(const std::vector<int64_t>& input_shape) override;
  bool fold_for_inference() override;

  const ResNetOptions& options() const { return options_; }

 private:
  ResNetOptions options_;
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  std::vector<torch::Tensor> folded_stem_;  ///< weight, bias (empty until fold_for_inference)
  std::vector<Bottleneck> blocks_;
  torch::nn::Linear fc_{nullptr};
};
TORCH_MODULE(ResNet);

}  // namespace voxfit::models
