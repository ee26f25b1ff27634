#include "voxfit/models/nets/vit.h"

#include <torch/torch.h>

#include <tuple>

#include "voxfit/core/error.h"
#include "voxfit/models/blocks/layers.h"
#include "voxfit/models/checkpoint.h"
#include "voxfit/models/shape_checks.h"

#include "../registry_support.h"

namespace voxfit::models {

namespace nn = torch::nn;

VisionTransformerImpl::VisionTransformerImpl(const VisionTransformerOptions& o) : options_(o) {
  check_patch("vit", o.img_size(), 2, o.patch_size(), "the patch size");
  const int64_t tokens = (o.img_size()[0] / o.patch_size()) * (o.img_size()[1] / o.patch_size()) + 1;
  patch_embed_ = register_module(
      "patch_embed",
      nn::Conv2d(nn::Conv2dOptions(o.in_channels(), o.hidden_size(), o.patch_size()).stride(o.patch_size())));
  cls_token_ = register_parameter("cls_token", torch::zeros({1, 1, o.hidden_size()}));
  pos_embed_ = register_parameter("pos_embed", torch::zeros({1, tokens, o.hidden_size()}));
  const auto block = TransformerBlockOptions()
                         .hidden_size(o.hidden_size())
                         .mlp_dim(o.mlp_dim())
                         .num_heads(o.num_heads())
                         .qkv_bias(o.qkv_bias())
                         .norm_eps(1e-6)
                         .attention(o.attention());
  for (int64_t i = 0; i < o.num_layers(); ++i)
    blocks_.push_back(register_module("block" + std::to_string(i), TransformerBlock(block)));
  norm_ = register_module("norm", nn::LayerNorm(nn::LayerNormOptions({o.hidden_size()}).eps(1e-6)));
  head_ = register_module("head", nn::Linear(o.hidden_size(), o.num_classes()));

  init_transformer_weights(*this);
  trunc_normal_(pos_embed_, 0.02);
  {
    torch::NoGradGuard no_grad;
    cls_token_.normal_(0.0, 1e-6);
  }
  if (o.channels_last()) to_channels_last(*this);
}

void VisionTransformerImpl::check_input(const std::vector<int64_t>& shape) const {
  check_channels("vit", shape, 2, options_.in_channels());
  check_spatial_equals("vit", shape, options_.img_size(), "the grid of the learned position embedding");
}

std::vector<torch::Tensor> VisionTransformerImpl::forward(const torch::Tensor& input) {
  check_input(input.sizes().vec());
  const auto x = input.contiguous(conv_memory_format(2, options_.channels_last()));
  const bool train = is_training();
  const auto embed = [this](const torch::Tensor& in) { return embed_patches(patch_embed_, in); };
  auto h = maybe_checkpoint(checkpoints(options_.checkpoint(), false), train, embed, x);
  h = torch::cat({cls_token_.expand({h.size(0), -1, -1}), h}, 1) + pos_embed_;
  const bool main = checkpoints(options_.checkpoint(), true);
  torch::Tensor pending;  // the last block's update, not yet added to h
  if (train && torch::GradMode::is_enabled()) {  // maybe_checkpoint's per-block gradient sums
    for (auto& block : blocks_)
      h = maybe_checkpoint(
          main, train, [block](const torch::Tensor& in) mutable { return block->forward(in); }, h);
  } else {  // inference: each block's last residual add runs in the next norm's kernel
    for (auto& block : blocks_) std::tie(h, pending) = block->forward_parts(h, pending);
  }
  const auto normed = pending.defined() ? apply_add_layer_norm(norm_, h, pending).normed : apply_layer_norm(norm_, h);
  return {head_(normed.select(1, 0))};
}

std::vector<std::vector<int64_t>> VisionTransformerImpl::output_shapes(const std::vector<int64_t>& in) {
  check_input(in);
  return {{in[0], options_.num_classes()}};
}

// This network's registry entry: CMake lists S_entry() of every src/models/nets/S.cpp for registry()
// (generated voxfit_model_entries.h); the helpers are in registry_support.h.
ModelEntry vit_entry() {
  ModelEntry e = detail::entry_for<VisionTransformerOptions>(
      "vit_base_patch16_224", "ViT-B/16 (timm), class token, 2D classification, the reference benchmark",
      TaskKind::kClassification2d, detail::classification_context(), 86567656,
      [](VisionTransformerOptions o, const ModelContext& ctx) -> Network {
        return std::make_shared<VisionTransformerImpl>(o.in_channels(ctx.in_channels)
                                                           .num_classes(ctx.num_classes)
                                                           .img_size(ctx.patch)
                                                           .attention(ctx.attention)
                                                           .checkpoint(ctx.checkpoint)
                                                           .channels_last(ctx.channels_last));
      });
  e.listing_order = 50;
  return e;
}

}  // namespace voxfit::models
