#pragma once
// nnU-Net v2's ResidualEncoderUNet (dynamic_network_architectures 0.4.4) as nnU-Net's ResEnc
// planners (M / L / XL) configure it: the network the patch and spacing imply by nnU-Net's rules.
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <array>
#include <string>
#include <vector>

#include "voxfit/models/network.h"
#include "voxfit/models/params.h"

namespace voxfit::models {

using Axes3 = std::array<int64_t, 3>;

/// The stages nnU-Net's get_pool_and_conv_props gives a patch at a spacing (network_topology.py,
/// min feature map 4, no cap on the poolings): stage s convolves with kernels[s] (3, or 1 on an
/// axis whose spacing is 2x the finest or more) and its first convolution strides by strides[s]
/// (stage 0: 1; then 2 on each axis still at least 8 voxels and within 2x of the finest spacing).
struct ResEncTopology {
  std::vector<Axes3> strides, kernels;
  /// The patch rounded up to a multiple of `divisor` on each axis, as nnU-Net pads it.
  Axes3 patch{}, divisor{};
  /// Per stage, where the options are known (resenc_plan): features min(base * 2^s, max) and
  /// residual blocks (blocks_per_stage, its last value repeated).
  std::vector<int64_t> features, blocks;
  size_t stages() const { return strides.size(); }
};
ResEncTopology resenc_topology(const std::vector<int64_t>& patch, const std::vector<double>& spacing);

/// The settable parameters (params.h): X(type, name, default, help).
#define VOXFIT_RESENC_UNET_PARAMS(X)                                                                                 \
  X(int64_t, base_features, 32, "features of the first stage, doubled per stage (nnU-Net's UNet_base_num_features)") \
  X(int64_t, max_features, 320, "cap on the features per stage (nnU-Net's unet_max_num_features)")                   \
  X(std::vector<int64_t>, blocks_per_stage, (std::vector<int64_t>{1, 3, 4, 6}),                                      \
    "residual blocks per encoder stage, the last value repeated for deeper stages (ResEnc: 1,3,4,6,6,...)")          \
  X(int64_t, decoder_convs, 1, "conv-norm-LeakyReLU units per decoder stage (ResEnc: 1)")                            \
  X(std::vector<double>, spacing, (std::vector<double>{1.0, 1.0, 1.0}),                                              \
    "target spacing D,H,W in mm: with the patch it decides the stages, pooling and kernels per axis as nnU-Net")     \
  X(bool, deep_supervision, true, "return every decoder stage's logits while training")

/// Defaults: ResEnc's architecture for a 1-channel, 14-class task at 96^3, 1 mm (62,815,736 parameters).
struct ResEncUNetOptions {
  TORCH_ARG(int64_t, in_channels) = 1;
  TORCH_ARG(int64_t, num_classes) = 14;
  /// The patch the topology is planned for (resenc_topology); inputs must be divisible as it is.
  TORCH_ARG(std::vector<int64_t>, img_size) = std::vector<int64_t>{96, 96, 96};
  VOXFIT_PARAMS(ResEncUNetOptions, VOXFIT_RESENC_UNET_PARAMS)
  /// `blocks`: each encoder stage; `all`: the stem and every decoder stage too.
  TORCH_ARG(CheckpointMode, checkpoint) = CheckpointMode::kNone;
  TORCH_ARG(bool, channels_last) = false;
};

/// The whole plan of a network with `o`: resenc_topology of its patch and spacing, with its widths
/// and blocks per stage. Throws ModelError for a patch too small to pool or base > max features.
ResEncTopology resenc_plan(const ResEncUNetOptions& o);

/// nnU-Net's memory proxy for this network (dynamic_network_architectures'
/// compute_conv_feature_map_size, which nnU-Net's planners compare with their reference value):
/// the elements of every convolution's output for one sample at the plan's (rounded) patch, the
/// transposed convolutions' and the segmentation outputs (each stage's with deep supervision, else
/// the last) included. `t` from resenc_plan.
int64_t nnunet_feature_map_size(const ResEncTopology& t, int64_t decoder_convs, int64_t classes,
                                bool deep_supervision);

/// nnU-Net's ConvDropoutNormReLU: conv (per-axis kernel and stride, padding (k-1)/2, bias as given)
/// -> affine InstanceNorm (eps 1e-5) -> LeakyReLU(0.01) where `act`.
class ResEncConvImpl : public torch::nn::Module {
 public:
  ResEncConvImpl(int64_t in, int64_t out, const Axes3& kernel, const Axes3& stride, bool bias, bool act);
  /// act(norm(conv(x)) + residual) (residual: undefined for none).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& residual = {});

 private:
  torch::nn::Conv3d conv_{nullptr};
  torch::nn::AnyModule norm_;
  bool act_;
  Axes3 stride_, padding_;
};
TORCH_MODULE(ResEncConv);

/// BasicBlockD (ResNet-D): conv1 (strided) -> conv2 (no activation), plus the input through the skip:
/// an average pool where the block strides and a bias-free 1x1 conv + norm where the width changes;
/// LeakyReLU after the add. nnU-Net initialises conv2's norm to zero.
class ResEncBlockImpl : public torch::nn::Module {
 public:
  ResEncBlockImpl(int64_t in, int64_t out, const Axes3& kernel, const Axes3& stride);
  torch::Tensor forward(const torch::Tensor& x);
  void zero_last_norm();

 private:
  ResEncConv conv1_{nullptr}, conv2_{nullptr}, projection_{nullptr};
  Axes3 stride_;
  bool pool_ = false;
};
TORCH_MODULE(ResEncBlock);

/// The state-dict names are nnU-Net's canonical ones (encoder.stem.convs.0.conv.weight,
/// encoder.stages.S.blocks.B.conv1.conv.weight, ...skip.1.conv.weight, decoder.stages.D.convs.0...,
/// decoder.transpconvs.D.weight, decoder.seg_layers.D.weight): a nnU-Net checkpoint's
/// `network_weights` hold these plus aliases of them (all_modules.*, decoder.encoder.*).
/// Input constraints: [B, in_channels, D, H, W], each axis divisible by the topology's divisor.
class ResEncUNetImpl : public NetworkImpl {
 public:
  explicit ResEncUNetImpl(const ResEncUNetOptions& options = {});
  std::vector<torch::Tensor> forward(const torch::Tensor& x) override;
  TaskKind task() const override { return TaskKind::kSegmentation3d; }
  void check_input(const std::vector<int64_t>& shape) const override;
  std::vector<std::vector<int64_t>> output_shapes(const std::vector<int64_t>& input_shape) override;
  std::optional<ActivationEstimate> saved_activations(const std::vector<int64_t>& input_shape, c10::ScalarType compute,
                                                      const KernelPaths& paths,
                                                      std::optional<CheckpointMode> recompute) const override;

  const ResEncUNetOptions& options() const { return options_; }
  /// The stages, pooling, kernels, widths and blocks it was built with (resenc_plan).
  const ResEncTopology& topology() const { return topology_; }

 private:
  ResEncUNetOptions options_;
  ResEncTopology topology_;
  ResEncConv stem_{nullptr};
  std::vector<std::vector<ResEncBlock>> stages_;
  std::vector<std::vector<ResEncConv>> decoder_;
  std::vector<torch::nn::ConvTranspose3d> upsample_;
  std::vector<torch::nn::Conv3d> heads_;
};
TORCH_MODULE(ResEncUNet);

}  // namespace voxfit::models
