#pragma once
// MONAI's names for voxfit's parameters, block type by block type (internal to src/models). voxfit's
// networks follow MONAI's module tree, but where MONAI wraps a layer (Convolution's `conv`,
// UnetrBasicBlock's `layer`, ViT's `vit`, nn.Sequential / nn.ModuleList indices) voxfit registers
// the layer itself; these rules add those levels back (MONAI 1.5's networks/nets/unetr.py,
// swin_unetr.py, networks/blocks/*.py). Each network's entry composes them for its own tree
// (ReferenceImplementation::name), and its MONAI constructor uses the value helpers at the end.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace voxfit::models::monai {

using Parts = std::vector<std::string>;
using Name = std::optional<std::string>;

/// "a.b.c" -> {a, b, c}; join(parts, i) puts parts i.. back together.
Parts split(const std::string& s);
std::string join(const Parts& p, size_t from);
bool is_digits(const std::string& s);

/// The digits of `s` after `prefix` ("block12", "block" -> "12"); nullopt unless `s` is exactly that.
Name index_after(const std::string& s, const std::string& prefix);

/// One tensor ("weight", "bias") of a make_conv layer inside MONAI's Convolution (a Sequential
/// holding it as "conv").
Name conv_param(const Parts& p, size_t i);

/// UnetBlock -> MONAI's UnetResBlock / UnetBasicBlock: conv1..3 are Convolutions, norm1..3 are
/// the norm modules themselves (MONAI's "instance" has no tensors; affine / batch norms do).
Name unet_block(const Parts& p, size_t i);

/// A transformer block (voxfit: norm1, attn.{qkv,proj,...}, norm2, mlp.{fc1,fc2}) -> MONAI's
/// TransformerBlock (attention output "out_proj") or SwinTransformerBlock ("proj"); both MLPs
/// are MONAI's MLPBlock (linear1, linear2).
Name transformer_block(const Parts& p, size_t i, const std::string& attn_out);

/// UnetrUpBlock: transp_conv (a Convolution), conv_block (a UnetResBlock / UnetBasicBlock).
Name up_block(const Parts& p, size_t i);

/// UnetrPrUpBlock (conv_block on): transp_conv_init, then blocks.i = Sequential(transposed
/// Convolution, UnetResBlock / UnetBasicBlock); voxfit names them transp_conv{i} and block{i}.
Name pr_up_block(const Parts& p, size_t i);

/// The 1x1 output convolution: MONAI's UnetOutBlock holds a Convolution as "conv".
Name out_block(const Parts& p);

/// A decoder of either net (decoder1..5, each a UnetrUpBlock).
Name decoder(const Parts& p);

/// An encoder that MONAI wraps in UnetrBasicBlock (its block is "layer").
Name basic_encoder(const Parts& p);

/// MONAI's key for `name` by `rule` (a network's top-level rule), or `name` where it has none.
std::string rename(const std::string& name, Name (*rule)(const Parts&));

/// MONAI's norm_name for voxfit's make_norm name; null where MONAI's blocks have no such choice.
nlohmann::json norm(const std::string& norm_name);
/// "true" / "1" / "yes" / "on".
bool is_true(const std::string& value);
/// "2,2,2,2" -> [2, 2, 2, 2].
std::vector<int64_t> integers(const std::string& value);

}  // namespace voxfit::models::monai
