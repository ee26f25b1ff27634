// voxfit's networks follow MONAI's module tree, but where MONAI wraps a layer (Convolution's
// `conv`, UnetrBasicBlock's `layer`, ViT's `vit`, nn.Sequential / nn.ModuleList indices) voxfit
// registers the layer itself. The rules below add those levels back, block type by block type,
// from MONAI 1.5's source (networks/nets/unetr.py, swin_unetr.py, networks/blocks/*.py).
#include "voxfit/models/monai_names.h"

#include <cctype>
#include <optional>
#include <vector>

namespace voxfit::models {

namespace {

using Parts = std::vector<std::string>;
using Name = std::optional<std::string>;

Parts split(const std::string& s) {
  Parts out;
  size_t start = 0;
  for (size_t dot; (dot = s.find('.', start)) != std::string::npos; start = dot + 1)
    out.push_back(s.substr(start, dot - start));
  out.push_back(s.substr(start));
  return out;
}

std::string join(const Parts& p, size_t from) {
  std::string s;
  for (size_t i = from; i < p.size(); ++i) s += (i > from ? "." : "") + p[i];
  return s;
}

bool is_digits(const std::string& s) {
  if (s.empty()) return false;
  for (const char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

/// The digits of `s` after `prefix` ("block12", "block" -> "12"); nullopt unless `s` is exactly that.
Name index_after(const std::string& s, const std::string& prefix) {
  if (s.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const std::string rest = s.substr(prefix.size());
  if (!is_digits(rest)) return std::nullopt;
  return rest;
}

/// One tensor ("weight", "bias") of a make_conv layer inside MONAI's Convolution (a Sequential
/// holding it as "conv").
Name conv_param(const Parts& p, size_t i) {
  if (p.size() != i + 1) return std::nullopt;
  return "conv." + p[i];
}

/// UnetBlock -> MONAI's UnetResBlock / UnetBasicBlock: conv1..3 are Convolutions, norm1..3 are
/// the norm modules themselves (MONAI's "instance" has no tensors; affine / batch norms do).
Name unet_block(const Parts& p, size_t i) {
  if (p.size() < i + 2) return std::nullopt;
  const std::string& m = p[i];
  if (m == "conv1" || m == "conv2" || m == "conv3") {
    const auto c = conv_param(p, i + 1);
    return c ? std::optional<std::string>(m + "." + *c) : std::nullopt;
  }
  if (m == "norm1" || m == "norm2" || m == "norm3") return join(p, i);
  return std::nullopt;
}

/// A transformer block (voxfit: norm1, attn.{qkv,proj,...}, norm2, mlp.{fc1,fc2}) -> MONAI's
/// TransformerBlock (attention output "out_proj") or SwinTransformerBlock ("proj"); both MLPs
/// are MONAI's MLPBlock (linear1, linear2).
Name transformer_block(const Parts& p, size_t i, const std::string& attn_out) {
  if (p.size() < i + 2) return std::nullopt;
  if (p[i] == "norm1" || p[i] == "norm2") return join(p, i);
  if (p[i] == "attn") return p[i + 1] == "proj" ? "attn." + attn_out + "." + join(p, i + 2) : join(p, i);
  if (p[i] == "mlp" && p.size() == i + 3) {
    if (p[i + 1] == "fc1") return "mlp.linear1." + p[i + 2];
    if (p[i + 1] == "fc2") return "mlp.linear2." + p[i + 2];
  }
  return std::nullopt;
}

/// UnetrUpBlock: transp_conv (a Convolution), conv_block (a UnetResBlock / UnetBasicBlock).
Name up_block(const Parts& p, size_t i) {
  if (p.size() < i + 2) return std::nullopt;
  Name rest;
  if (p[i] == "transp_conv")
    rest = conv_param(p, i + 1);
  else if (p[i] == "conv_block")
    rest = unet_block(p, i + 1);
  return rest ? std::optional<std::string>(p[i] + "." + *rest) : std::nullopt;
}

/// UnetrPrUpBlock (conv_block on): transp_conv_init, then blocks.i = Sequential(transposed
/// Convolution, UnetResBlock / UnetBasicBlock); voxfit names them transp_conv{i} and block{i}.
Name pr_up_block(const Parts& p, size_t i) {
  if (p.size() < i + 2) return std::nullopt;
  if (p[i] == "transp_conv_init") {
    const auto c = conv_param(p, i + 1);
    return c ? std::optional<std::string>("transp_conv_init." + *c) : std::nullopt;
  }
  if (const auto n = index_after(p[i], "transp_conv")) {
    const auto c = conv_param(p, i + 1);
    return c ? std::optional<std::string>("blocks." + *n + ".0." + *c) : std::nullopt;
  }
  if (const auto n = index_after(p[i], "block")) {
    const auto b = unet_block(p, i + 1);
    return b ? std::optional<std::string>("blocks." + *n + ".1." + *b) : std::nullopt;
  }
  return std::nullopt;
}

/// The 1x1 output convolution: MONAI's UnetOutBlock holds a Convolution as "conv".
Name out_block(const Parts& p) {
  const auto c = conv_param(p, 1);
  return c ? std::optional<std::string>("out.conv." + *c) : std::nullopt;
}

/// A decoder of either net (decoder1..5, each a UnetrUpBlock).
Name decoder(const Parts& p) {
  if (!index_after(p[0], "decoder")) return std::nullopt;
  const auto b = up_block(p, 1);
  return b ? std::optional<std::string>(p[0] + "." + *b) : std::nullopt;
}

/// An encoder that MONAI wraps in UnetrBasicBlock (its block is "layer").
Name basic_encoder(const Parts& p) {
  const auto b = unet_block(p, 1);
  return b ? std::optional<std::string>(p[0] + ".layer." + *b) : std::nullopt;
}

Name unetr(const Parts& p) {
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

/// swinViT's children: patch_embed (MONAI's PatchEmbed holds the conv as "proj"), and per stage
/// n voxfit's layers{n}_block{i}, layers{n}_downsample and layers{n}c, which MONAI holds in
/// ModuleLists of one: layers{n}.0.blocks.{i}, layers{n}.0.downsample, layers{n}c.0 (a
/// UnetrBasicBlock).
Name swin_transformer(const Parts& p) {
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

Name swin_unetr(const Parts& p) {
  const std::string& top = p[0];
  if (top == "swinViT") return swin_transformer(p);
  if (top == "encoder1" || top == "encoder2" || top == "encoder3" || top == "encoder4" || top == "encoder10")
    return basic_encoder(p);
  if (top == "out") return out_block(p);
  return decoder(p);
}

}  // namespace

bool has_monai_names(const std::string& model) { return model == "unetr" || model == "swin_unetr"; }

std::string monai_name(const std::string& model, const std::string& name) {
  const Parts p = split(name);
  Name mapped;
  if (model == "unetr")
    mapped = unetr(p);
  else if (model == "swin_unetr")
    mapped = swin_unetr(p);
  return mapped.value_or(name);
}

}  // namespace voxfit::models
