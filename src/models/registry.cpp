// The name -> factory registry: each entry declares its settable parameters with defaults taken
// from its options struct (one source of truth) and maps a ModelContext onto those options.
#include <torch/torch.h>

#include <algorithm>
#include <sstream>

#include "voxfit/core/error.h"
#include "voxfit/core/units.h"
#include "voxfit/models/blocks/layers.h"
#include "voxfit/models/nets/resnet.h"
#include "voxfit/models/nets/swin_unetr.h"
#include "voxfit/models/nets/unet3d.h"
#include "voxfit/models/nets/unetr.h"
#include "voxfit/models/nets/vit.h"
#include "voxfit/models/network.h"

namespace voxfit::models {

namespace {

std::string text(int64_t v) { return std::to_string(v); }
std::string text(bool v) { return v ? "true" : "false"; }
std::string text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}
std::string text(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

std::string option_name(const std::string& param) {
  std::string s = "--" + param;
  std::replace(s.begin(), s.end(), '_', '-');
  return s;
}

// Typed reads of ModelContext::params (or the declared default); errors name the CLI option.
class Params {
 public:
  Params(std::string model, std::vector<ModelParam> declared, const ModelContext& ctx)
      : model_(std::move(model)), declared_(std::move(declared)), ctx_(ctx) {}

  int64_t integer(const std::string& name, int64_t min = 1) const {
    const std::string v = raw(name);
    const auto out = to_integer(v);
    if (!out) fail(name, v, "an integer");
    if (*out < min) fail(name, v, "an integer >= " + std::to_string(min));
    return *out;
  }

  double real(const std::string& name) const {
    const std::string v = raw(name);
    const auto out = to_number(v);
    if (!out || !(*out > 0)) fail(name, v, "a positive number");
    return *out;
  }

  bool flag(const std::string& name) const {
    const std::string v = raw(name);
    if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
    if (v == "false" || v == "0" || v == "no" || v == "off") return false;
    fail(name, v, "true or false");
    return false;
  }

  std::vector<int64_t> integers(const std::string& name) const {
    const std::string v = raw(name);
    std::vector<int64_t> out;
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ',')) {
      const auto x = to_integer(item);
      if (!x || *x < 1) fail(name, v, "a comma-separated list of positive integers");
      out.push_back(*x);
    }
    if (out.empty()) fail(name, v, "a comma-separated list of positive integers");
    return out;
  }

  std::string norm(const std::string& name) const {
    const std::string v = raw(name);
    if (!is_norm_name(v)) fail(name, v, "instance, instance_affine, batch or none");
    return v;
  }

 private:
  std::string raw(const std::string& name) const {
    const auto it = ctx_.params.find(name);
    if (it != ctx_.params.end()) return it->second;
    for (const auto& p : declared_)
      if (p.name == name) return p.default_value;
    throw ModelError(model_ + ": parameter '" + name + "' is not declared");  // a registry bug
  }
  [[noreturn]] void fail(const std::string& name, const std::string& value, const std::string& expected) const {
    throw ConfigError(option_name(name) + " (" + model_ + "): expected " + expected + ", got '" + value + "'");
  }

  std::string model_;
  std::vector<ModelParam> declared_;
  const ModelContext& ctx_;
};

ModelEntry unet3d_entry() {
  const UNet3DOptions d;
  ModelEntry e{
      "unet3d",
      "nnU-Net v2 3d_fullres PlainConvUNet (32-64-128-256-320-320, deep supervision)",
      TaskKind::kSegmentation3d,
      {{"stages", text(d.stages()), "resolution stages of the UNet (input divisible by 2^(stages-1))"},
       {"base_features", text(d.base_features()), "features of the first UNet stage, doubled per stage"},
       {"max_features", text(d.max_features()), "cap on the UNet's features per stage"},
       {"convs_per_stage", text(d.convs_per_stage()), "conv-norm-LeakyReLU units per UNet stage"},
       {"deep_supervision", text(d.deep_supervision()), "UNet returns every decoder stage's logits while training"},
       {"norm_name", d.norm(), "normalisation: instance, instance_affine, batch or none"}},
      nullptr,
      ModelContext{},
      31205254};
  const auto declared = e.params;
  e.make = [declared](const ModelContext& ctx) -> Network {
    const Params p("unet3d", declared, ctx);
    return std::make_shared<UNet3DImpl>(UNet3DOptions()
                                            .in_channels(ctx.in_channels)
                                            .num_classes(ctx.num_classes)
                                            .stages(p.integer("stages", 2))
                                            .base_features(p.integer("base_features"))
                                            .max_features(p.integer("max_features"))
                                            .convs_per_stage(p.integer("convs_per_stage"))
                                            .deep_supervision(p.flag("deep_supervision"))
                                            .norm(p.norm("norm_name"))
                                            .checkpoint(ctx.checkpoint)
                                            .channels_last(ctx.channels_last));
  };
  e.channels_last_on_cuda = true;
  return e;
}

ModelEntry unetr_entry() {
  const UNETROptions d;
  ModelEntry e{"unetr",
               "UNETR (MONAI 1.3): ViT-B encoder on 16^3 patches, conv decoder, feature size 16",
               TaskKind::kSegmentation3d,
               {{"feature_size", text(d.feature_size()), "decoder / embedding width of the net"},
                {"hidden_size", text(d.hidden_size()), "transformer token width"},
                {"mlp_dim", text(d.mlp_dim()), "transformer MLP width"},
                {"num_heads", text(d.num_heads()), "attention heads (per stage for swin_unetr)"},
                {"num_layers", text(d.num_layers()), "transformer layers"},
                {"qkv_bias", text(d.qkv_bias()), "bias on the attention q/k/v projection"},
                {"norm_name", d.norm(), "normalisation: instance, instance_affine, batch or none"},
                {"res_block", text(d.res_block()), "residual (true) or plain decoder conv blocks"}},
               nullptr,
               ModelContext{},
               92784046};
  const auto declared = e.params;
  e.make = [declared](const ModelContext& ctx) -> Network {
    const Params p("unetr", declared, ctx);
    return std::make_shared<UNETRImpl>(UNETROptions()
                                           .in_channels(ctx.in_channels)
                                           .num_classes(ctx.num_classes)
                                           .img_size(ctx.patch)
                                           .feature_size(p.integer("feature_size"))
                                           .hidden_size(p.integer("hidden_size"))
                                           .mlp_dim(p.integer("mlp_dim"))
                                           .num_heads(p.integer("num_heads"))
                                           .num_layers(p.integer("num_layers"))
                                           .qkv_bias(p.flag("qkv_bias"))
                                           .norm(p.norm("norm_name"))
                                           .res_block(p.flag("res_block"))
                                           .attention(ctx.attention)
                                           .checkpoint(ctx.checkpoint)
                                           .channels_last(ctx.channels_last));
  };
  return e;
}

ModelEntry swin_unetr_entry() {
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
  return e;
}

ModelContext classification_context() {
  ModelContext ctx;
  ctx.in_channels = 3;
  ctx.num_classes = 1000;
  ctx.patch = {224, 224};
  return ctx;
}

ModelEntry resnet50_entry() {
  const ResNetOptions d;
  ModelEntry e{"resnet50",
               "ResNet-50 v1.5 (timm / torchvision), 2D classification, the reference benchmark",
               TaskKind::kClassification2d,
               {{"blocks_per_stage", text(d.blocks_per_stage()), "ResNet bottlenecks per stage (4 stages)"},
                {"zero_init_last", text(d.zero_init_last()), "zero the last BatchNorm of each bottleneck (timm init)"}},
               nullptr,
               classification_context(),
               25557032};
  const auto declared = e.params;
  e.make = [declared](const ModelContext& ctx) -> Network {
    const Params p("resnet50", declared, ctx);
    return std::make_shared<ResNetImpl>(ResNetOptions()
                                            .in_channels(ctx.in_channels)
                                            .num_classes(ctx.num_classes)
                                            .blocks_per_stage(p.integers("blocks_per_stage"))
                                            .zero_init_last(p.flag("zero_init_last"))
                                            .checkpoint(ctx.checkpoint)
                                            .channels_last(ctx.channels_last));
  };
  return e;
}

ModelEntry vit_entry() {
  const VisionTransformerOptions d;
  ModelEntry e{"vit_base_patch16_224",
               "ViT-B/16 (timm), class token, 2D classification, the reference benchmark",
               TaskKind::kClassification2d,
               {{"patch_size", text(d.patch_size()), "ViT patch size (square)"},
                {"hidden_size", text(d.hidden_size()), "transformer token width"},
                {"mlp_dim", text(d.mlp_dim()), "transformer MLP width"},
                {"num_heads", text(d.num_heads()), "attention heads (per stage for swin_unetr)"},
                {"num_layers", text(d.num_layers()), "transformer layers"},
                {"qkv_bias", text(d.qkv_bias()), "bias on the attention q/k/v projection"}},
               nullptr,
               classification_context(),
               86567656};
  const auto declared = e.params;
  e.make = [declared](const ModelContext& ctx) -> Network {
    const Params p("vit_base_patch16_224", declared, ctx);
    return std::make_shared<VisionTransformerImpl>(VisionTransformerOptions()
                                                       .in_channels(ctx.in_channels)
                                                       .num_classes(ctx.num_classes)
                                                       .img_size(ctx.patch)
                                                       .patch_size(p.integer("patch_size"))
                                                       .hidden_size(p.integer("hidden_size"))
                                                       .mlp_dim(p.integer("mlp_dim"))
                                                       .num_heads(p.integer("num_heads"))
                                                       .num_layers(p.integer("num_layers"))
                                                       .qkv_bias(p.flag("qkv_bias"))
                                                       .attention(ctx.attention)
                                                       .checkpoint(ctx.checkpoint)
                                                       .channels_last(ctx.channels_last));
  };
  return e;
}

}  // namespace

const std::vector<ModelEntry>& registry() {
  static const std::vector<ModelEntry> entries = {unet3d_entry(), unetr_entry(), swin_unetr_entry(), resnet50_entry(),
                                                  vit_entry()};
  return entries;
}

const ModelEntry& find_model(const std::string& name) {
  std::string known;
  for (const auto& e : registry()) {
    if (e.name == name) return e;
    known += (known.empty() ? "" : ", ") + e.name;
  }
  throw ConfigError("unknown model '" + name + "' (known: " + known + ")");
}

bool resolve_channels_last(const ModelEntry& entry, std::optional<bool> requested, const torch::Device& device) {
  return requested.value_or(entry.channels_last_on_cuda && device.is_cuda());
}

Network make_model(const std::string& name, const ModelContext& ctx) {
  const ModelEntry& entry = find_model(name);
  for (const auto& [key, value] : ctx.params) {
    const bool declared = std::any_of(entry.params.begin(), entry.params.end(),
                                      [&key = key](const ModelParam& p) { return p.name == key; });
    if (!declared) {
      std::string names;
      for (const auto& p : entry.params) names += (names.empty() ? "" : ", ") + option_name(p.name);
      throw ConfigError(option_name(key) + " is not a parameter of " + name + " (its parameters: " + names + ")");
    }
  }
  if (ctx.in_channels < 1) throw ConfigError("--in-channels must be >= 1, got " + std::to_string(ctx.in_channels));
  if (ctx.num_classes < 1) throw ConfigError("--classes must be >= 1, got " + std::to_string(ctx.num_classes));
  const size_t dims = entry.task == TaskKind::kSegmentation3d ? 3 : 2;
  if (ctx.patch.size() != dims)
    throw ModelError(name + ": patch " + shape_to_string(ctx.patch) + " needs " + std::to_string(dims) + " sizes (" +
                     to_string(entry.task) + ")");
  Network net = entry.make(ctx);
  std::vector<int64_t> shape = {1, ctx.in_channels};
  shape.insert(shape.end(), ctx.patch.begin(), ctx.patch.end());
  net->check_input(shape);
  return net;
}

}  // namespace voxfit::models
