#pragma once
// SegResNetDS (Myronenko; MONAI 1.5's monai.networks.nets.SegResNetDS) as Auto3DSeg's segresnet
// configures it: a pre-activation residual encoder (norm -> ReLU -> conv, twice, plus the input)
// with strided 3x3x3 downsampling, and a decoder of one block per level after a transposed conv
// (3x3x3, stride 2) added to the skip, with a 1x1x1 head on the `dsdepth` finest levels.
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <string>
#include <vector>

#include "voxfit/models/network.h"
#include "voxfit/models/params.h"

namespace voxfit::models {

/// The settable parameters (params.h): X(type, name, default, help). Defaults: Auto3DSeg's.
#define VOXFIT_SEGRESNET_DS_PARAMS(X)                                                                      \
  X(int64_t, init_filters, 32, "SegResNetDS's width at full resolution (x2 per level)")                    \
  X(std::vector<int64_t>, blocks_down, (std::vector<int64_t>{1, 2, 2, 4, 4}),                              \
    "SegResNetDS residual blocks per encoder level (one level per value)")                                 \
  X(std::string, norm_name, "instance_affine",                                                             \
    "SegResNetDS's norm: instance_affine (Auto3DSeg's INSTANCE) or batch (SegResNetDS's own default)")     \
  X(bool, deep_supervision, true, "return the logits of the dsdepth finest decoder levels while training") \
  X(int64_t, dsdepth, 4, "SegResNetDS's decoder levels with a head when deep supervision is on (Auto3DSeg: 4)")

struct SegResNetDSOptions {
  TORCH_ARG(int64_t, in_channels) = 1;
  TORCH_ARG(int64_t, num_classes) = 14;
  VOXFIT_PARAMS(SegResNetDSOptions, VOXFIT_SEGRESNET_DS_PARAMS)
  /// `blocks`: each level's residual blocks, the encoder's and the decoder's.
  TORCH_ARG(CheckpointMode, checkpoint) = CheckpointMode::kNone;
  TORCH_ARG(bool, channels_last) = false;

 public:  // TORCH_ARG leaves its members private
  /// MONAI's dsdepth: the levels with a head (1 without deep supervision).
  int64_t heads() const { return deep_supervision_ ? dsdepth_ : 1; }
};

/// MONAI's SegResBlock: x + conv2(relu(norm2(conv1(relu(norm1(x)))))), 3x3x3 convs without bias.
class SegResBlockImpl : public torch::nn::Module {
 public:
  SegResBlockImpl(int64_t channels, const std::string& norm);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::AnyModule norm1_, norm2_;
  torch::nn::Conv3d conv1_{nullptr}, conv2_{nullptr};
};
TORCH_MODULE(SegResBlock);

/// Input constraints: [B, in_channels, D, H, W], each divisible by 2^(levels - 1).
class SegResNetDSImpl : public NetworkImpl {
 public:
  explicit SegResNetDSImpl(const SegResNetDSOptions& options = {});
  std::vector<torch::Tensor> forward(const torch::Tensor& x) override;
  TaskKind task() const override { return TaskKind::kSegmentation3d; }
  void check_input(const std::vector<int64_t>& shape) const override;
  std::vector<std::vector<int64_t>> output_shapes(const std::vector<int64_t>& input_shape) override;
  std::optional<ActivationEstimate> saved_activations(const std::vector<int64_t>& input_shape, c10::ScalarType compute,
                                                      const KernelPaths& paths,
                                                      std::optional<CheckpointMode> recompute) const override;
  const SegResNetDSOptions& options() const { return options_; }

 private:
  SegResNetDSOptions options_;
  torch::nn::Conv3d conv_init_{nullptr};
  std::vector<std::vector<SegResBlock>> enc_, dec_;
  std::vector<torch::nn::Conv3d> down_;  ///< all levels but the deepest
  std::vector<torch::nn::ConvTranspose3d> up_;
  std::vector<torch::nn::Conv3d> heads_;  ///< per decoder level, undefined where it has none
};
TORCH_MODULE(SegResNetDS);

}  // namespace voxfit::models
