#include "voxfit/models/nets/unet3d.h"

#include <torch/torch.h>

#include <algorithm>

#include "voxfit/core/block_scope.h"
#include "voxfit/core/error.h"
#include "voxfit/models/blocks/layers.h"
#include "voxfit/models/checkpoint.h"
#include "voxfit/models/shape_checks.h"

#include "../activation_rules.h"
#include "../registry_support.h"

namespace voxfit::models {

namespace nn = torch::nn;

UNet3DImpl::UNet3DImpl(const UNet3DOptions& o) : options_(o) {
  if (o.stages() < 2) throw ModelError("unet3d: stages must be >= 2, got " + std::to_string(o.stages()));
  if (o.base_features() < 1 || o.max_features() < o.base_features())
    throw ModelError("unet3d: need 1 <= base_features <= max_features, got " + std::to_string(o.base_features()) +
                     " and " + std::to_string(o.max_features()));
  if (o.convs_per_stage() < 1)
    throw ModelError("unet3d: convs_per_stage must be >= 1, got " + std::to_string(o.convs_per_stage()));
  std::vector<int64_t> features;
  for (int64_t s = 0; s < o.stages(); ++s)
    features.push_back(std::min(o.base_features() << std::min<int64_t>(s, 20), o.max_features()));
  for (int64_t s = 0; s < o.stages(); ++s) {
    encoder_.push_back(ConvStack(ConvStackOptions(s == 0 ? o.in_channels() : features[s - 1], features[s])
                                     .num_convs(o.convs_per_stage())
                                     .stride(s == 0 ? 1 : 2)
                                     .norm(o.norm_name())));
    register_module("encoder" + std::to_string(s), encoder_.back());
  }
  // Decoder stage i brings stage (stages-1-i) up to the resolution of stage (stages-2-i).
  for (int64_t i = 0; i + 1 < o.stages(); ++i) {
    const int64_t below = features[o.stages() - 1 - i], skip = features[o.stages() - 2 - i];
    const auto n = std::to_string(i);
    upsample_.push_back(make_conv(3, {below, skip, 2, 2, true, true}));
    decoder_.push_back(ConvStack(ConvStackOptions(2 * skip, skip).num_convs(o.convs_per_stage()).norm(o.norm_name())));
    heads_.push_back(make_conv(3, {skip, o.num_classes(), 1, 1, true, false}));
    register_module("transpconv" + n, upsample_.back().ptr());
    register_module("decoder" + n, decoder_.back());
    register_module("seg" + n, heads_.back().ptr());
  }
  init_he_weights(*this);
  if (o.channels_last()) to_channels_last(*this);
}

void UNet3DImpl::check_input(const std::vector<int64_t>& shape) const {
  check_channels("unet3d", shape, 3, options_.in_channels());
  check_divisible("unet3d", shape, int64_t{1} << (options_.stages() - 1),
                  "2^(stages-1) for " + std::to_string(options_.stages()) + " stages");
}

std::vector<torch::Tensor> UNet3DImpl::forward(const torch::Tensor& input) {
  check_input(input.sizes().vec());
  const auto x = input.contiguous(conv_memory_format(3, options_.channels_last()));
  const bool main = checkpoints(options_.checkpoint(), true);
  const bool rest = checkpoints(options_.checkpoint(), false);
  std::vector<torch::Tensor> skips;
  torch::Tensor h = x;
  for (size_t s = 0; s < encoder_.size(); ++s) {
    const core::BlockScope block("encoder", static_cast<int>(s));
    auto stage = encoder_[s];
    h = maybe_checkpoint(
        main, is_training(), [stage](const torch::Tensor& in) mutable { return stage->forward(in); }, h);
    skips.push_back(h);
  }
  const bool all_heads = is_training() && options_.deep_supervision();
  std::vector<torch::Tensor> outputs;
  const size_t n = decoder_.size();
  for (size_t i = 0; i < n; ++i) {
    const core::BlockScope block("decoder", static_cast<int>(i));  // with its segmentation head
    auto up = upsample_[i];
    auto stage = decoder_[i];
    h = maybe_checkpoint(rest, is_training(),
                         [up, stage](const std::vector<torch::Tensor>& in) mutable -> std::vector<torch::Tensor> {
                           return {stage->forward_concat(up.forward(in[0]), in[1])};
                         },
                         {h, skips[n - 1 - i]});
    if (all_heads || i + 1 == n) outputs.push_back(heads_[i].forward(h));
  }
  std::reverse(outputs.begin(), outputs.end());
  return outputs;
}

std::vector<std::vector<int64_t>> UNet3DImpl::output_shapes(const std::vector<int64_t>& in) {
  check_input(in);
  std::vector<std::vector<int64_t>> shapes;
  const int64_t count = is_training() && options_.deep_supervision() ? options_.stages() - 1 : 1;
  for (int64_t level = 0; level < count; ++level)
    shapes.push_back({in[0], options_.num_classes(), in[2] >> level, in[3] >> level, in[4] >> level});
  return shapes;
}

// nnU-Net's planner asks the network for its feature maps (compute_conv_feature_map_size); voxfit
// asks it for what its training forward keeps, by memory_estimate.h's rules.
std::optional<ActivationEstimate> UNet3DImpl::saved_activations(const std::vector<int64_t>& shape, c10::ScalarType c,
                                                                const KernelPaths& paths,
                                                                std::optional<CheckpointMode> recompute) const {
  using namespace rules;
  const auto& o = options_;
  const CheckpointMode mode = recompute.value_or(o.checkpoint());
  Tally t(c, shape[0], paths);
  std::vector<std::int64_t> features;
  for (std::int64_t s = 0; s < o.stages(); ++s)
    features.push_back(std::min(o.base_features() << std::min<std::int64_t>(s, 20), o.max_features()));
  const auto voxels = [&](std::int64_t s) { return (shape[2] >> s) * (shape[3] >> s) * (shape[4] >> s); };
  const bool affine = o.norm_name() == "instance_affine";
  const auto stack = [&](std::int64_t in, std::int64_t out, std::int64_t in_voxels, std::int64_t v, ScalarType dt,
                         bool checkpointed) {
    if (checkpointed) {
      t.keep(out * v, t.compute());
      return;
    }
    for (std::int64_t i = 0; i < o.convs_per_stage(); ++i)
      conv_norm_act(t, i == 0 ? in : out, out, i == 0 ? in_voxels : v, v, i == 0 ? dt : t.compute(), 3, true, affine);
  };
  const bool main = checkpoints(mode, true), rest = checkpoints(mode, false);
  for (std::int64_t s = 0; s < o.stages(); ++s) {
    t.block("encoder" + std::to_string(s));
    stack(s == 0 ? o.in_channels() : features[s - 1], features[s], voxels(s == 0 ? 0 : s - 1), voxels(s),
          s == 0 ? c10::kFloat : t.compute(), main);
  }
  const std::int64_t n = o.stages() - 1;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t below = features[n - i], skip = features[n - 1 - i], v = voxels(n - 1 - i);
    t.block("decoder" + std::to_string(i));
    // The transposed conv's output goes into the concatenation only; the concatenation stays.
    if (!rest) {
      t.matmul_layer(conv_weights(below, skip, 2, true), below * voxels(n - i), t.compute());
      // Lean decoders keep the upsampled part, not the concatenation.
      t.keep((t.paths().lean_decoders ? 1 : 2) * skip * v, t.compute());
    }
    stack(2 * skip, skip, v, v, t.compute(), rest);
    if (o.deep_supervision() || i + 1 == n) {
      t.matmul_layer(conv_weights(skip, o.num_classes(), 1, true), skip * v, t.compute());
      t.output(o.num_classes() * v, t.compute());
    }
  }
  return t.finish();
}

// This network's registry entry: CMake lists S_entry() of every src/models/nets/S.cpp for registry()
// (generated voxfit_model_entries.h); the helpers are in registry_support.h.
ModelEntry unet3d_entry() {
  ModelEntry e = detail::entry_for<UNet3DOptions>(
      "unet3d", "nnU-Net v2 3d_fullres PlainConvUNet (32-64-128-256-320-320, deep supervision)",
      TaskKind::kSegmentation3d, ModelContext{}, 31205254, [](UNet3DOptions o, const ModelContext& ctx) -> Network {
        return std::make_shared<UNet3DImpl>(o.in_channels(ctx.in_channels)
                                                .num_classes(ctx.num_classes)
                                                .checkpoint(ctx.checkpoint)
                                                .channels_last(ctx.channels_last));
      });
  e.channels_last_on_cuda = true;
  e.listing_order = 10;
  e.recipe.optimizer = "sgd";  // nnU-Net's: SGD, Nesterov 0.99, lr 1e-2, poly
  return e;
}

}  // namespace voxfit::models
