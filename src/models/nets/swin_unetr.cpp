#include "voxfit/models/nets/swin_unetr.h"

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
                                                         .normalize(o.normalize_hidden())
                                                         .use_v2(o.use_v2())
                                                         .attention(o.attention())
                                                         .checkpoint_blocks(checkpoints(o.checkpoint(), true))
                                                         .checkpoint_rest(rest)));
  const auto block = [&](int64_t in, int64_t out) { return UnetBlock(UnetBlockOptions(in, out).norm(o.norm_name())); };
  encoder1_ = register_module("encoder1", block(o.in_channels(), f));
  encoder2_ = register_module("encoder2", block(f, f));
  encoder3_ = register_module("encoder3", block(2 * f, 2 * f));
  encoder4_ = register_module("encoder4", block(4 * f, 4 * f));
  encoder10_ = register_module("encoder10", block(16 * f, 16 * f));
  const auto up = [&](int64_t in, int64_t out) { return UnetrUpBlock(UnetrUpBlockOptions(in, out).norm(o.norm_name())); };
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

namespace {

std::int64_t product(const Size3& s) { return s[0] * s[1] * s[2]; }

// One stage of the Swin encoder on a `size` grid of `dim` channels in the stream's dtype (the
// compute dtype: convolution and linear outputs and their sums), its blocks and patch merging.
// A shifted stage's attention mask [windows, n, n] (float32) is made on the first forward and then
// cached by the module; it is charged here, as the tracker's largest step (the first) sees it.
void swin_stage(rules::Tally& t, const SwinUNETROptions& o, std::size_t stage, const Size3& size, std::int64_t dim, bool main,
                bool rest) {
  using namespace rules;
  const ScalarType c = t.compute();
  const std::int64_t w = o.window_size(), tokens = product(size), mlp = static_cast<std::int64_t>(dim * o.mlp_ratio());
  const auto [window, shift] = window_and_shift(size, {w, w, w}, {w / 2, w / 2, w / 2});
  Size3 padded;
  for (int i = 0; i < 3; ++i) padded[i] = (size[i] + window[i] - 1) / window[i] * window[i];
  const std::int64_t n = product(window), windows = product(padded) / n, heads = o.num_heads()[stage];
  const bool shifts = shift[0] > 0 || shift[1] > 0 || shift[2] > 0;
  if (shifts) t.keep_unbatched(windows * n * n, c10::kFloat);
  for (std::int64_t b = 0; b < o.depths()[stage]; ++b) {
    if (main) {
      t.keep(tokens * dim, c);
      continue;
    }
    const bool masked = shifts && b % 2 == 1;
    pre_norm(t, tokens, dim, c);
    // The relative-position index of a shrunken window is a copy of part of the full one's.
    if (n < w * w * w) t.keep_unbatched(n * n, c10::kLong);
    attention_half(t, product(padded), n, dim, heads, o.qkv_bias(), o.attention(),
                   (masked ? windows : 1) * heads * n * n);
    mlp_half(t, tokens, dim, mlp, c);
  }
  if (rest) {
    t.keep(tokens * dim / 4, c);
    return;
  }
  // Patch merging: the 8-way concatenation (as the norm saves it: ATen under autocast casts it to
  // float32, kernels::layer_norm keeps it as it is), the norm's output, and the reduction's
  // [tokens / 8, 2 dim] output.
  t.keep(tokens * dim, t.layer_norm_dtype(c));
  t.layer_norm(tokens / 8);
  linear_after_norm(t, 8 * dim * 2 * dim, tokens * dim);
}

}  // namespace

std::optional<ActivationEstimate> SwinUNETRImpl::saved_activations(const std::vector<int64_t>& shape,
                                                                   c10::ScalarType c, const KernelPaths& paths,
                                                                   std::optional<CheckpointMode> recompute) const {
  using namespace rules;
  const auto& o = options_;
  const CheckpointMode mode = recompute.value_or(o.checkpoint());
  Tally t(c, shape[0], paths);
  const ScalarType f32 = c10::kFloat;
  const bool main = checkpoints(mode, true), rest = checkpoints(mode, false);
  const std::int64_t f = o.feature_size(), voxels = shape[2] * shape[3] * shape[4];
  const auto at = [&](int halvings) { return voxels >> (3 * halvings); };
  t.block("swin_vit");
  t.matmul_layer(conv_weights(o.in_channels(), f, 2, true), o.in_channels() * voxels, f32);
  t.keep(f * at(1), c);  // the patch embedding: stage 0's input and the first hidden state
  // The hidden states: layer-normed over channels and made contiguous for the decoder. ATen's norm
  // returns float32 (a half input is cast and the cast saved), so the copy is float32 too;
  // kernels::layer_norm keeps its input as given and returns its dtype. Without normalize, the
  // stages' outputs are copied as they are. A merging output nothing else keeps is the norm's input.
  const auto hidden = [&](std::int64_t elements, std::int64_t channels, bool merged) {
    if (!o.normalize_hidden()) {
      if (merged) t.keep(elements, c);
      return c;
    }
    const ScalarType normed = t.layer_norm_dtype(c);
    if (normed != c)
      t.keep(elements, normed);  // the cast the norm keeps
    else if (merged && !rest)
      t.keep(elements, c);
    t.layer_norm(elements / channels);
    t.keep(elements, normed);
    return normed;
  };
  std::vector<ScalarType> dtypes = {hidden(f * at(1), f, false)};
  for (std::size_t s = 0; s < 4; ++s) {
    const std::int64_t dim = f << s;
    const std::int64_t v = at(1 + static_cast<int>(s));
    if (s > 0) t.keep(dim * v, c);  // the stage's contiguous input
    if (o.use_v2()) {  // v2's residual conv block before the stage: its output is the stage's input
      if (rest)
        t.keep(dim * v, c);
      else
        unet_block(t, dim, dim, v, c, true);
    }
    const std::int64_t side = 1 + static_cast<std::int64_t>(s);
    const Size3 size = {shape[2] >> side, shape[3] >> side, shape[4] >> side};
    swin_stage(t, o, s, size, dim, main, rest);
    dtypes.push_back(hidden(2 * dim * at(2 + static_cast<int>(s)), 2 * dim, true));
  }
  const auto block = [&](const char* name, std::int64_t in, std::int64_t out, std::int64_t v, ScalarType dt) {
    t.block(name);
    if (rest) {
      t.keep(out * v, c);
      return c;
    }
    return unet_block(t, in, out, v, dt, true);
  };
  const ScalarType e0 = block("encoder1", o.in_channels(), f, voxels, f32);
  const ScalarType e1 = block("encoder2", f, f, at(1), dtypes[0]);
  const ScalarType e2 = block("encoder3", 2 * f, 2 * f, at(2), dtypes[1]);
  const ScalarType e3 = block("encoder4", 4 * f, 4 * f, at(3), dtypes[2]);
  ScalarType dec = block("encoder10", 16 * f, 16 * f, at(5), dtypes[4]);
  const struct {
    const char* name;
    std::int64_t in, out;
    int level;
    ScalarType skip;
  } ups[] = {{"decoder5", 16 * f, 8 * f, 4, dtypes[3]},
             {"decoder4", 8 * f, 4 * f, 3, e3},
             {"decoder3", 4 * f, 2 * f, 2, e2},
             {"decoder2", 2 * f, f, 1, e1},
             {"decoder1", f, f, 0, e0}};
  for (const auto& up : ups) {
    t.block(up.name);
    if (rest)
      t.keep(up.out * at(up.level), c);
    else
      dec = up_block(t, up.in, up.out, at(up.level), dec, up.skip, true);
  }
  t.block("out");
  t.matmul_layer(conv_weights(f, o.num_classes(), 1, true), f * voxels, dec);
  t.output(o.num_classes() * voxels, c);
  return t.finish();
}

namespace {

/// swinViT's children: patch_embed (MONAI's PatchEmbed holds the conv as "proj"), and per stage
/// n voxfit's layers{n}_block{i}, layers{n}_downsample and layers{n}c, which MONAI holds in
/// ModuleLists of one: layers{n}.0.blocks.{i}, layers{n}.0.downsample, layers{n}c.0 (a
/// UnetrBasicBlock).
monai::Name monai_swin_transformer(const monai::Parts& p) {
  using namespace monai;
  if (p.size() < 3) return std::nullopt;
  const std::string& m = p[1];
  if (m == "patch_embed" && p.size() == 3) return "swinViT.patch_embed.proj." + p[2];
  if (m.compare(0, 6, "layers") != 0) return std::nullopt;
  size_t end = 6;
  while (end < m.size() && std::isdigit(static_cast<unsigned char>(m[end]))) ++end;
  const std::string stage = m.substr(6, end - 6), suffix = m.substr(end);
  if (stage.empty()) return std::nullopt;
  const std::string layer = "swinViT.layers" + stage;
  if (suffix == "c") {
    const auto b = unet_block(p, 2);
    return b ? std::optional<std::string>(layer + "c.0.layer." + *b) : std::nullopt;
  }
  if (suffix == "_downsample") {
    if (p[2] != "norm" && p[2] != "reduction") return std::nullopt;
    return layer + ".0.downsample." + join(p, 2);
  }
  if (const auto i = index_after(suffix, "_block")) {
    const auto b = transformer_block(p, 2, "proj");
    return b ? std::optional<std::string>(layer + ".0.blocks." + *i + "." + *b) : std::nullopt;
  }
  return std::nullopt;
}

monai::Name monai_swin_unetr(const monai::Parts& p) {
  using namespace monai;
  const std::string& top = p[0];
  if (top == "swinViT") return monai_swin_transformer(p);
  if (top == "encoder1" || top == "encoder2" || top == "encoder3" || top == "encoder4" || top == "encoder10")
    return basic_encoder(p);
  if (top == "out") return out_block(p);
  return decoder(p);
}

}  // namespace

Network make_swin_unetr(SwinUNETROptions o, const ModelContext& ctx) {
  return std::make_shared<SwinUNETRImpl>(o.in_channels(ctx.in_channels)
                                             .num_classes(ctx.num_classes)
                                             .attention(ctx.attention)
                                             .checkpoint(ctx.checkpoint)
                                             .channels_last(ctx.channels_last));
}

ReferenceImplementation swin_unetr_monai_reference() {
  return {"monai", [](const std::string& name) { return monai::rename(name, monai_swin_unetr); },
          [](const ModelContext& ctx, const std::map<std::string, std::string>& params) -> nlohmann::json {
            nlohmann::json kwargs = {{"in_channels", ctx.in_channels}, {"out_channels", ctx.num_classes}};
            kwargs["feature_size"] = std::stoll(params.at("feature_size"));
            kwargs["depths"] = monai::integers(params.at("depths"));
            kwargs["num_heads"] = monai::integers(params.at("num_heads"));
            const int64_t w = std::stoll(params.at("window_size"));
            kwargs["window_size"] = std::vector<int64_t>{w, w, w};
            kwargs["mlp_ratio"] = std::stod(params.at("mlp_ratio"));
            kwargs["qkv_bias"] = monai::is_true(params.at("qkv_bias"));
            kwargs["normalize"] = monai::is_true(params.at("normalize_hidden"));
            kwargs["use_v2"] = monai::is_true(params.at("use_v2"));
            kwargs["norm_name"] = monai::norm(params.at("norm_name"));
            return {{"class", "monai.networks.nets.SwinUNETR"}, {"kwargs", kwargs}};
          },
          nullptr};
}

// This network's registry entry: CMake lists S_entry() of every src/models/nets/S.cpp for registry()
// (generated voxfit_model_entries.h); the helpers are in registry_support.h.
ModelEntry swin_unetr_entry() {
  ModelEntry e = detail::entry_for<SwinUNETROptions>(
      "swin_unetr", "Swin UNETR (MONAI 1.3): Swin-T encoder (patch 2, window 7), conv decoder, feature size 48",
      TaskKind::kSegmentation3d, ModelContext{}, 62187296, make_swin_unetr);
  e.listing_order = 30;
  e.reference = swin_unetr_monai_reference();
  e.reference_counts = {{"swin_unetr_24", {{"feature_size", "24"}}, 15703304},
                        {"swin_unetr_12", {{"feature_size", "12"}}, 4078220},
                        {"swin_unetr_v2_48", {{"use_v2", "true"}}, 72762656}};
  return e;
}

}  // namespace voxfit::models
