#include "voxfit/models/nets/swin_unetr.h"

#include <torch/torch.h>

#include "voxfit/core/block_scope.h"
#include "voxfit/core/error.h"
#include "voxfit/models/blocks/layers.h"
#include "voxfit/models/checkpoint.h"
#include "voxfit/models/shape_checks.h"

#include "../registry_support.h"

namespace voxfit::models {

namespace {
constexpr int64_t kDivisor = 32;
}

SwinUNETRImpl::SwinUNETRImpl(const SwinUNETROptions& o) : options_(o) {
  if (o.feature_size() < 12 || o.feature_size() % 12 != 0)
    throw ModelError("swin_unetr: feature_size must be a positive multiple of 12, got " +
                     std::to_string(o.feature_size()));
  if (o.window_size() < 1) throw ModelError("swin_unetr: window_size must be >= 1");
  const int64_t f = o.feature_size();
  const bool rest = checkpoints(o.checkpoint(), false);
  swin_ = register_module("swinViT", SwinTransformer(SwinTransformerOptions()
                                                         .in_channels(o.in_channels())
                                                         .embed_dim(f)
                                                         .window_size(o.window_size())
                                                         .depths(o.depths())
                                                         .num_heads(o.num_heads())
                                                         .mlp_ratio(o.mlp_ratio())
                                                         .qkv_bias(o.qkv_bias())
                                                         .normalize(o.normalize())
                                                         .use_v2(o.use_v2())
                                                         .attention(o.attention())
                                                         .checkpoint_blocks(checkpoints(o.checkpoint(), true))
                                                         .checkpoint_rest(rest)));
  const auto block = [&](int64_t in, int64_t out) { return UnetBlock(UnetBlockOptions(in, out).norm(o.norm())); };
  encoder1_ = register_module("encoder1", block(o.in_channels(), f));
  encoder2_ = register_module("encoder2", block(f, f));
  encoder3_ = register_module("encoder3", block(2 * f, 2 * f));
  encoder4_ = register_module("encoder4", block(4 * f, 4 * f));
  encoder10_ = register_module("encoder10", block(16 * f, 16 * f));
  const auto up = [&](int64_t in, int64_t out) { return UnetrUpBlock(UnetrUpBlockOptions(in, out).norm(o.norm())); };
  decoder5_ = register_module("decoder5", up(16 * f, 8 * f));
  decoder4_ = register_module("decoder4", up(8 * f, 4 * f));
  decoder3_ = register_module("decoder3", up(4 * f, 2 * f));
  decoder2_ = register_module("decoder2", up(2 * f, f));
  decoder1_ = register_module("decoder1", up(f, f));
  out_ = make_conv(3, {f, o.num_classes(), 1, 1, true, false});
  register_module("out", out_.ptr());
  init_transformer_weights(*swin_);
  if (o.channels_last()) to_channels_last(*this);
}

void SwinUNETRImpl::check_input(const std::vector<int64_t>& shape) const {
  check_channels("swin_unetr", shape, 3, options_.in_channels());
  check_divisible("swin_unetr", shape, kDivisor, "patch size 2 and four 2x patch mergings");
}

std::vector<torch::Tensor> SwinUNETRImpl::forward(const torch::Tensor& input) {
  check_input(input.sizes().vec());
  const auto format = conv_memory_format(3, options_.channels_last());
  const auto x = input.contiguous(format);
  const bool train = is_training();
  const bool rest = checkpoints(options_.checkpoint(), false);
  std::vector<torch::Tensor> hidden;
  {
    const core::BlockScope scope("swin_vit");
    hidden = swin_->forward(x);
    for (auto& h : hidden) h = h.contiguous(format);
  }
  const auto run = [&](UnetBlock module, const torch::Tensor& in) {
    return maybe_checkpoint(
        rest, train, [module](const torch::Tensor& t) mutable { return module->forward(t); }, in);
  };
  const auto run_up = [&](UnetrUpBlock module, const torch::Tensor& in, const torch::Tensor& skip) {
    return maybe_checkpoint(rest, train,
                            [module](const std::vector<torch::Tensor>& t) mutable -> std::vector<torch::Tensor> {
                              return {module->forward(t[0], t[1])};
                            },
                            {in, skip});
  };
  const auto scoped = [](const char* kind, int index, const auto& fn) {
    const core::BlockScope scope(kind, index);
    return fn();
  };
  const auto enc0 = scoped("encoder", 1, [&] { return run(encoder1_, x); });
  const auto enc1 = scoped("encoder", 2, [&] { return run(encoder2_, hidden[0]); });
  const auto enc2 = scoped("encoder", 3, [&] { return run(encoder3_, hidden[1]); });
  const auto enc3 = scoped("encoder", 4, [&] { return run(encoder4_, hidden[2]); });
  auto dec = scoped("encoder", 10, [&] { return run(encoder10_, hidden[4]); });
  dec = scoped("decoder", 5, [&] { return run_up(decoder5_, dec, hidden[3]); });
  dec = scoped("decoder", 4, [&] { return run_up(decoder4_, dec, enc3); });
  dec = scoped("decoder", 3, [&] { return run_up(decoder3_, dec, enc2); });
  dec = scoped("decoder", 2, [&] { return run_up(decoder2_, dec, enc1); });
  dec = scoped("decoder", 1, [&] { return run_up(decoder1_, dec, enc0); });
  return {scoped("out", -1, [&] { return out_.forward(dec); })};
}

std::vector<std::vector<int64_t>> SwinUNETRImpl::output_shapes(const std::vector<int64_t>& in) {
  check_input(in);
  return {{in[0], options_.num_classes(), in[2], in[3], in[4]}};
}

// This network's registry entry: CMake lists S_entry() of every src/models/nets/S.cpp for registry()
// (generated voxfit_model_entries.h); the helpers are in registry_support.h.
ModelEntry swin_unetr_entry() {
  using detail::Params;
  using detail::text;
  const SwinUNETROptions d;
  ModelEntry e{"swin_unetr",
               "Swin UNETR (MONAI 1.3): Swin-T encoder (patch 2, window 7), conv decoder, feature size 48",
               TaskKind::kSegmentation3d,
               {{"feature_size", text(d.feature_size()), "decoder / embedding width of the net"},
                {"depths", text(d.depths()), "Swin blocks per stage (4 stages)"},
                {"num_heads", text(d.num_heads()), "attention heads (per stage for swin_unetr)"},
                {"window_size", text(d.window_size()), "Swin attention window (cubic)"},
                {"mlp_ratio", text(d.mlp_ratio()), "Swin MLP width over channel width"},
                {"qkv_bias", text(d.qkv_bias()), "bias on the attention q/k/v projection"},
                {"normalize_hidden", text(d.normalize()), "layer-normalise the Swin hidden states fed to the decoder"},
                {"use_v2", text(d.use_v2()), "SwinUNETR-v2: a residual conv block before each Swin stage"},
                {"norm_name", d.norm(), "normalisation: instance, instance_affine, batch or none"}},
               nullptr,
               ModelContext{},
               62187296};
  const auto declared = e.params;
  e.make = [declared](const ModelContext& ctx) -> Network {
    const Params p("swin_unetr", declared, ctx);
    return std::make_shared<SwinUNETRImpl>(SwinUNETROptions()
                                               .in_channels(ctx.in_channels)
                                               .num_classes(ctx.num_classes)
                                               .feature_size(p.integer("feature_size"))
                                               .depths(p.integers("depths"))
                                               .num_heads(p.integers("num_heads"))
                                               .window_size(p.integer("window_size"))
                                               .mlp_ratio(p.real("mlp_ratio"))
                                               .qkv_bias(p.flag("qkv_bias"))
                                               .normalize(p.flag("normalize_hidden"))
                                               .use_v2(p.flag("use_v2"))
                                               .norm(p.norm("norm_name"))
                                               .attention(ctx.attention)
                                               .checkpoint(ctx.checkpoint)
                                               .channels_last(ctx.channels_last));
  };
  e.listing_order = 30;
  return e;
}

}  // namespace voxfit::models
