#pragma once
// The names MONAI's network of the same architecture gives voxfit's parameters and buffers, so
// that an exported state dict loads into MONAI's UNETR / SwinUNETR (MONAI 1.3 - 1.5 layouts).
#include <string>

namespace voxfit::models {

/// True where `model`'s registry entry names a MONAI reference implementation whose names voxfit
/// maps (ModelEntry::reference): unetr (monai.networks.nets.UNETR), swin_unetr (SwinUNETR).
bool has_monai_names(const std::string& model);

/// MONAI's state-dict key for voxfit's dotted parameter or buffer name `name` of `model`
/// (e.g. unetr "block3.attn.proj.weight" -> "vit.blocks.3.attn.out_proj.weight"). Names with no
/// MONAI counterpart, and every name of a model without one (unet3d: MONAI's DynUNet is built
/// differently), come back unchanged.
std::string monai_name(const std::string& model, const std::string& name);

}  // namespace voxfit::models
