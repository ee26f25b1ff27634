#include "voxfit/models/nets/unetr.h"

#include <torch/torch.h>

#include "voxfit/core/block_scope.h"
#include "voxfit/core/error.h"
#include "voxfit/models/blocks/layers.h"
#include "voxfit/models/checkpoint.h"
#include "voxfit/models/shape_checks.h"

#include "../activation_rules.h"
#include "../monai_naming.h"
#include "../registry_support.h"

namespace voxfit::models {

namespace nn = torch::nn;

UNETRImpl::UNETRImpl(const UNETROptions& o) : options_(o) {
  check_patch("unetr", o.img_size(), 3, kPatch, "the ViT's 16^3 patch embedding");
  if (o.num_layers() < 4)
    throw ModelError("unetr: num_layers must be >= 4 (skips from layers L/4, L/2, 3L/4), got " +
                     std::to_string(o.num_layers()));
  if (o.feature_size() < 1) throw ModelError("unetr: feature_size must be >= 1");
  int64_t tokens = 1;
  for (const int64_t s : o.img_size()) {
    grid_.push_back(s / kPatch);
    tokens *= s / kPatch;
  }
  const int64_t f = o.feature_size(), hidden = o.hidden_size();
  patch_embed_ =
      register_module("patch_embedding", nn::Conv3d(nn::Conv3dOptions(o.in_channels(), hidden, kPatch).stride(kPatch)));
  pos_embed_ = register_parameter("position_embeddings", torch::zeros({1, tokens, hidden}));
  const auto block = TransformerBlockOptions()
                         .hidden_size(hidden)
                         .mlp_dim(o.mlp_dim())
                         .num_heads(o.num_heads())
                         .qkv_bias(o.qkv_bias())
                         .attention(o.attention());
  for (int64_t i = 0; i < o.num_layers(); ++i)
    blocks_.push_back(register_module("block" + std::to_string(i), TransformerBlock(block)));
  norm_ = register_module("norm", nn::LayerNorm(nn::LayerNormOptions({hidden})));
  encoder1_ = register_module("encoder1",
                              UnetBlock(UnetBlockOptions(o.in_channels(), f).norm(o.norm_name()).residual(o.res_block())));
  const auto pr_up = [&](int64_t out, int64_t layers) {
    return UnetrPrUpBlock(UnetrPrUpBlockOptions(hidden, out, layers).norm(o.norm_name()).residual(o.res_block()));
  };
  encoder2_ = register_module("encoder2", pr_up(2 * f, 2));
  encoder3_ = register_module("encoder3", pr_up(4 * f, 1));
  encoder4_ = register_module("encoder4", pr_up(8 * f, 0));
  const auto up = [&](int64_t in, int64_t out) {
    return UnetrUpBlock(UnetrUpBlockOptions(in, out).norm(o.norm_name()).residual(o.res_block()));
  };
  decoder5_ = register_module("decoder5", up(hidden, 8 * f));
  decoder4_ = register_module("decoder4", up(8 * f, 4 * f));
  decoder3_ = register_module("decoder3", up(4 * f, 2 * f));
  decoder2_ = register_module("decoder2", up(2 * f, f));
  out_ = make_conv(3, {f, o.num_classes(), 1, 1, true, false});
  register_module("out", out_.ptr());

  for (auto& b : blocks_) init_transformer_weights(*b);
  trunc_normal_(pos_embed_, 0.02);
  if (o.channels_last()) to_channels_last(*this);
}

void UNETRImpl::check_input(const std::vector<int64_t>& shape) const {
  check_channels("unetr", shape, 3, options_.in_channels());
  check_divisible("unetr", shape, kPatch, "the ViT's 16^3 patch embedding");
  check_spatial_equals("unetr", shape, options_.img_size(), "the grid of the learned position embedding");
}

torch::Tensor UNETRImpl::tokens_to_volume(const torch::Tensor& tokens) const {
  return contiguous_grad(tokens)
      .view({tokens.size(0), grid_[0], grid_[1], grid_[2], tokens.size(2)})
      .permute({0, 4, 1, 2, 3})
      .contiguous(conv_memory_format(3, options_.channels_last()));
}

std::vector<torch::Tensor> UNETRImpl::forward(const torch::Tensor& input) {
  check_input(input.sizes().vec());
  const auto x = input.contiguous(conv_memory_format(3, options_.channels_last()));
  const bool train = is_training();
  const bool main = checkpoints(options_.checkpoint(), true);
  const bool rest = checkpoints(options_.checkpoint(), false);

  torch::Tensor h;
  {
    const core::BlockScope scope("patch_embed");
    h = embed_patches(patch_embed_, x) + pos_embed_;
  }
  std::vector<torch::Tensor> hidden;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const core::BlockScope scope("transformer", static_cast<int>(i));
    auto block = blocks_[i];
    h = maybe_checkpoint(
        main, train, [block](const torch::Tensor& in) mutable { return block->forward(in); }, h);
    hidden.push_back(h);
  }
  {
    const core::BlockScope scope("norm");
    h = apply_layer_norm(norm_, h);
  }
  const int64_t layers = options_.num_layers();
  const auto skip = [&](int64_t quarter) { return tokens_to_volume(hidden[quarter * layers / 4]); };

  const auto run = [&](auto module, const torch::Tensor& in) {
    return maybe_checkpoint(
        rest, train, [module](const torch::Tensor& t) mutable { return module->forward(t); }, in);
  };
  const auto run_up = [&](UnetrUpBlock module, const torch::Tensor& in, const torch::Tensor& skip_in) {
    return maybe_checkpoint(rest, train,
                            [module](const std::vector<torch::Tensor>& t) mutable -> std::vector<torch::Tensor> {
                              return {module->forward(t[0], t[1])};
                            },
                            {in, skip_in});
  };
  // Each block's scope holds its input's token -> volume copy, which the block keeps for backward.
  const auto scoped = [](const char* kind, int index, const auto& fn) {
    const core::BlockScope scope(kind, index);
    return fn();
  };
  const auto enc1 = scoped("encoder", 1, [&] { return run(encoder1_, x); });
  const auto enc2 = scoped("encoder", 2, [&] { return run(encoder2_, skip(1)); });
  const auto enc3 = scoped("encoder", 3, [&] { return run(encoder3_, skip(2)); });
  const auto enc4 = scoped("encoder", 4, [&] { return run(encoder4_, skip(3)); });
  auto dec = scoped("decoder", 5, [&] { return run_up(decoder5_, tokens_to_volume(h), enc4); });
  dec = scoped("decoder", 4, [&] { return run_up(decoder4_, dec, enc3); });
  dec = scoped("decoder", 3, [&] { return run_up(decoder3_, dec, enc2); });
  dec = scoped("decoder", 2, [&] { return run_up(decoder2_, dec, enc1); });
  return {scoped("out", -1, [&] { return out_.forward(dec); })};
}

std::vector<std::vector<int64_t>> UNETRImpl::output_shapes(const std::vector<int64_t>& in) {
  check_input(in);
  return {{in[0], options_.num_classes(), in[2], in[3], in[4]}};
}

std::optional<ActivationEstimate> UNETRImpl::saved_activations(const std::vector<int64_t>& shape, c10::ScalarType c,
                                                               const KernelPaths& paths,
                                                               std::optional<CheckpointMode> recompute) const {
  using namespace rules;
  const auto& o = options_;
  const CheckpointMode mode = recompute.value_or(o.checkpoint());
  Tally t(c, shape[0], paths);
  const std::int64_t p = UNETRImpl::kPatch, f = o.feature_size(), hidden = o.hidden_size(), k = o.num_classes();
  const std::int64_t grid = (shape[2] / p) * (shape[3] / p) * (shape[4] / p), voxels = shape[2] * shape[3] * shape[4];
  const auto at = [&](int doublings) { return grid << (3 * doublings); };  // voxels after x2 upsamplings
  const bool main = checkpoints(mode, true), rest = checkpoints(mode, false);
  t.block("patch_embed");
  t.matmul_layer(conv_weights(o.in_channels(), hidden, p, true), o.in_channels() * voxels, c10::kFloat);
  t.keep(grid * hidden, c10::kFloat);  // conv output + the float32 position embedding
  for (std::int64_t i = 0; i < o.num_layers(); ++i) {
    t.block("transformer" + std::to_string(i));
    if (main)
      t.keep(grid * hidden, c10::kFloat);
    else
      transformer_block(t, grid, hidden, o.mlp_dim(), o.num_heads(), o.qkv_bias(), o.attention());
  }
  t.block("norm");
  t.layer_norm(grid);
  t.keep(grid * hidden, c10::kFloat);
  // tokens -> volume: a float32 copy the first conv reads; under autocast its cast copy stays
  // instead, except in front of a checkpointed block, which keeps its input as given.
  const auto volume = [&] {
    if (!t.autocast() || rest) t.keep(grid * hidden, c10::kFloat);
  };
  const auto block = [&](std::int64_t in, std::int64_t out, std::int64_t v, ScalarType dt) {
    unet_block(t, in, out, v, dt, o.res_block());
  };
  t.block("encoder1");
  if (rest)
    t.keep(f * voxels, t.compute());
  else
    block(o.in_channels(), f, voxels, c10::kFloat);
  for (int e = 2; e <= 4; ++e) {
    const std::int64_t out = f << (e - 1), layers = 4 - e;
    t.block("encoder" + std::to_string(e));
    volume();
    if (rest) {
      t.keep(out * at(1 + static_cast<int>(layers)), t.compute());
      continue;
    }
    t.matmul_layer(conv_weights(hidden, out, 2, false), hidden * grid, c10::kFloat);
    t.keep(out * at(1), t.compute());
    for (int l = 0; l < layers; ++l) {
      t.matmul_layer(conv_weights(out, out, 2, false), out * at(1 + l), t.compute());
      t.keep(out * at(2 + l), t.compute());
      block(out, out, at(2 + l), t.compute());
    }
  }
  for (int d = 5; d >= 2; --d) {
    const std::int64_t in = d == 5 ? hidden : f << (d - 1), out = f << (d - 2);
    const std::int64_t v = at(6 - d);
    t.block("decoder" + std::to_string(d));
    if (d == 5) volume();
    if (rest) {
      t.keep(out * v, t.compute());
      continue;
    }
    up_block(t, in, out, v, d == 5 ? c10::kFloat : t.compute(), t.compute(), o.res_block());
  }
  t.block("out");
  t.matmul_layer(conv_weights(f, k, 1, true), f * voxels, t.compute());
  t.output(k * voxels, t.compute());
  return t.finish();
}

namespace {

// MONAI's UNETR names (monai_naming.h).
monai::Name monai_unetr(const monai::Parts& p) {
  using namespace monai;
  const std::string& top = p[0];
  if (top == "position_embeddings" && p.size() == 1) return "vit.patch_embedding.position_embeddings";
  if (top == "patch_embedding" && p.size() == 2) return "vit.patch_embedding.patch_embeddings." + p[1];
  if (top == "norm") return "vit." + join(p, 0);
  if (const auto n = index_after(top, "block")) {
    const auto b = transformer_block(p, 1, "out_proj");
    return b ? std::optional<std::string>("vit.blocks." + *n + "." + *b) : std::nullopt;
  }
  if (top == "encoder1") return basic_encoder(p);
  if (top == "encoder2" || top == "encoder3" || top == "encoder4") {
    const auto b = pr_up_block(p, 1);
    return b ? std::optional<std::string>(top + "." + *b) : std::nullopt;
  }
  if (top == "out") return out_block(p);
  return decoder(p);
}


}  // namespace

// This network's registry entry: CMake lists S_entry() of every src/models/nets/S.cpp for registry()
// (generated voxfit_model_entries.h); the helpers are in registry_support.h.
ModelEntry unetr_entry() {
  ModelEntry e = detail::entry_for<UNETROptions>(
      "unetr", "UNETR (MONAI 1.3): ViT-B encoder on 16^3 patches, conv decoder, feature size 16",
      TaskKind::kSegmentation3d, ModelContext{}, 92784046, [](UNETROptions o, const ModelContext& ctx) -> Network {
        return std::make_shared<UNETRImpl>(o.in_channels(ctx.in_channels)
                                               .num_classes(ctx.num_classes)
                                               .img_size(ctx.patch)
                                               .attention(ctx.attention)
                                               .checkpoint(ctx.checkpoint)
                                               .channels_last(ctx.channels_last));
      });
  e.listing_order = 20;
  e.reference = ReferenceImplementation{
      "monai", [](const std::string& name) { return monai::rename(name, monai_unetr); },
      [](const ModelContext& ctx, const std::map<std::string, std::string>& params) -> nlohmann::json {
        if (params.at("num_layers") != "12") return nullptr;  // MONAI's UNETR fixes 12 layers
        nlohmann::json kwargs = {{"in_channels", ctx.in_channels}, {"out_channels", ctx.num_classes}};
        kwargs["img_size"] = ctx.patch;
        for (const char* k : {"feature_size", "hidden_size", "mlp_dim", "num_heads"}) kwargs[k] = std::stoll(params.at(k));
        kwargs["qkv_bias"] = monai::is_true(params.at("qkv_bias"));
        kwargs["res_block"] = monai::is_true(params.at("res_block"));
        kwargs["norm_name"] = monai::norm(params.at("norm_name"));
        return {{"class", "monai.networks.nets.UNETR"}, {"kwargs", kwargs}};
      },
      nullptr};
  return e;
}

}  // namespace voxfit::models
