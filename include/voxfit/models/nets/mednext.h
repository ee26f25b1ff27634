#pragma once
// MedNeXt (Roy et al., MICCAI 2023) as MONAI 1.5's create_mednext builds it: ConvNeXt-style blocks
// (depthwise k^3 conv -> GroupNorm(C, C) -> 1x1 expansion -> GELU -> 1x1 compression, residual),
// strided depthwise down blocks and transposed up blocks with 1x1 residual paths, additive skips.
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <vector>

#include "voxfit/models/network.h"
#include "voxfit/models/params.h"

namespace voxfit::models {

/// The settable parameters (params.h): X(type, name, default, help). Defaults: variant S.
#define VOXFIT_MEDNEXT_PARAMS(X)                                                                               \
  X(int64_t, init_filters, 32, "MedNeXt's width at full resolution (x2 per level)")                            \
  X(int64_t, kernel_size, 3, "MedNeXt's depthwise kernel (3 or 5 in create_mednext)")                          \
  X(std::vector<int64_t>, encoder_expansion, (std::vector<int64_t>{2, 2, 2, 2}),                               \
    "MedNeXt's expansion ratio per encoder level")                                                             \
  X(std::vector<int64_t>, decoder_expansion, (std::vector<int64_t>{2, 2, 2, 2}),                               \
    "MedNeXt's expansion ratio per decoder level")                                                             \
  X(int64_t, bottleneck_expansion, 2, "MedNeXt's expansion ratio in the bottleneck")                           \
  X(std::vector<int64_t>, blocks_down, (std::vector<int64_t>{2, 2, 2, 2}), "MedNeXt blocks per encoder level") \
  X(int64_t, blocks_bottleneck, 2, "MedNeXt blocks in the bottleneck")                                         \
  X(std::vector<int64_t>, blocks_up, (std::vector<int64_t>{2, 2, 2, 2}), "MedNeXt blocks per decoder level")   \
  X(bool, deep_supervision, false, "return every decoder stage's logits while training")

struct MedNeXtOptions {
  TORCH_ARG(int64_t, in_channels) = 1;
  TORCH_ARG(int64_t, num_classes) = 14;
  VOXFIT_PARAMS(MedNeXtOptions, VOXFIT_MEDNEXT_PARAMS)
  /// `blocks`: each level's blocks; `all`: the down, up and output blocks too.
  TORCH_ARG(CheckpointMode, checkpoint) = CheckpointMode::kNone;
  TORCH_ARG(bool, channels_last) = false;
};

/// MedNeXtBlock / MedNeXtDownBlock / MedNeXtUpBlock: `stride` 2 down (a strided depthwise conv and
/// a strided 1x1 residual conv), -2 up (transposed, each path padded by one zero at the start of
/// every axis), 1 plain (identity residual).
class MedNeXtBlockImpl : public torch::nn::Module {
 public:
  MedNeXtBlockImpl(int64_t in, int64_t out, int64_t expansion, int64_t kernel, int stride);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int stride_;
  int64_t padding_;
  torch::nn::Conv3d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr}, res_conv_{nullptr};
  torch::nn::ConvTranspose3d up_conv1_{nullptr}, up_res_conv_{nullptr};
  torch::nn::GroupNorm norm_{nullptr};
};
TORCH_MODULE(MedNeXtBlock);

/// Input constraints: [B, in_channels, D, H, W], each divisible by 16 (four levels).
class MedNeXtImpl : public NetworkImpl {
 public:
  explicit MedNeXtImpl(const MedNeXtOptions& options = {});
  std::vector<torch::Tensor> forward(const torch::Tensor& x) override;
  TaskKind task() const override { return TaskKind::kSegmentation3d; }
  void check_input(const std::vector<int64_t>& shape) const override;
  std::vector<std::vector<int64_t>> output_shapes(const std::vector<int64_t>& input_shape) override;
  std::optional<ActivationEstimate> saved_activations(const std::vector<int64_t>& input_shape, c10::ScalarType compute,
                                                      const KernelPaths& paths,
                                                      std::optional<CheckpointMode> recompute) const override;
  const MedNeXtOptions& options() const { return options_; }

 private:
  MedNeXtOptions options_;
  torch::nn::Conv3d stem_{nullptr};
  std::vector<std::vector<MedNeXtBlock>> enc_, dec_;
  std::vector<MedNeXtBlock> down_, up_, bottleneck_;
  torch::nn::ConvTranspose3d out_{nullptr};
  std::vector<torch::nn::ConvTranspose3d> ds_heads_;  ///< bottleneck first, as MONAI's out_blocks
};
TORCH_MODULE(MedNeXt);

}  // namespace voxfit::models
