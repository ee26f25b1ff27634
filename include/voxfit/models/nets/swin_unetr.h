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
#include "voxfit/models/params.h"

namespace voxfit::models {

/// Defaults: feature size 48, 1 channel in, 14 out (62,187,296 parameters; 72,762,656 with use_v2).
/// The settable parameters (params.h): X(type, name, default, help).
#define VOXFIT_SWIN_UNETR_PARAMS(X)                                                                           \
  X(int64_t, feature_size, 48, "decoder / embedding width of the net (stage i: feature_size * 2^i; a multiple of 12)") \
  X(std::vector<int64_t>, depths, (std::vector<int64_t>{2, 2, 2, 2}), "Swin blocks per stage (4 stages)")     \
  X(std::vector<int64_t>, num_heads, (std::vector<int64_t>{3, 6, 12, 24}),                                    \
    "attention heads (per stage for swin_unetr)")                                                             \
  X(int64_t, window_size, 7, "Swin attention window (cubic)")                                                 \
  X(double, mlp_ratio, 4.0, "Swin MLP width over channel width")                                              \
  X(bool, qkv_bias, true, "bias on the attention q/k/v projection")                                           \
  X(bool, normalize_hidden, true,                                                                             \
    "layer-normalise the Swin hidden states fed to the decoder (MONAI's `normalize`)")                        \
  X(bool, use_v2, false, "SwinUNETR-v2: a residual conv block before each Swin stage")                        \
  X(std::string, norm_name, "instance", "normalisation: instance, instance_affine, batch or none")

struct SwinUNETROptions {
  TORCH_ARG(int64_t, in_channels) = 1;
  TORCH_ARG(int64_t, num_classes) = 14;
  VOXFIT_PARAMS(SwinUNETROptions, VOXFIT_SWIN_UNETR_PARAMS)
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
  std::optional<ActivationEstimate> saved_activations(const std::vector<int64_t>& input_shape, c10::ScalarType compute,
                                                      const KernelPaths& paths,
                                                      std::optional<CheckpointMode> recompute) const override;

  const SwinUNETROptions& options() const { return options_; }

 private:
  SwinUNETROptions options_;
  SwinTransformer swin_{nullptr};
  UnetBlock encoder1_{nullptr}, encoder2_{nullptr}, encoder3_{nullptr}, encoder4_{nullptr}, encoder10_{nullptr};
  UnetrUpBlock decoder5_{nullptr}, decoder4_{nullptr}, decoder3_{nullptr}, decoder2_{nullptr}, decoder1_{nullptr};
  torch::nn::AnyModule out_;
};
TORCH_MODULE(SwinUNETR);

/// SwinUNETR with `o`'s parameters for `ctx` (channels, classes, attention, recomputation, layout):
/// what the registry entries swin_unetr and swin_unetr_v2 build.
Network make_swin_unetr(SwinUNETROptions o, const ModelContext& ctx);
/// MONAI's names and constructor (monai.networks.nets.SwinUNETR) for `voxfit export`.
ReferenceImplementation swin_unetr_monai_reference();

}  // namespace voxfit::models
