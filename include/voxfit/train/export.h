#pragma once
// `voxfit export`: a checkpoint's network weights as a state dict that Python's torch.load reads
// (a dict of name -> CPU tensor, parameters and buffers), named as the network's reference
// implementation names it (MONAI's UNETR / SwinUNETR, nnU-Net's ResidualEncoderUNet) where it has
// one, with a JSON sidecar that says what the weights are for.
#include <cstdint>
#include <filesystem>
#include <string>

namespace voxfit::train {

/// Key names of the exported dict: the reference implementation's (ModelEntry::reference, its
/// aliases included) or voxfit's own dotted names.
enum class ExportNames { kReference, kVoxfit };
/// "reference" (also spelt "monai" or "nnunet") | "voxfit"; throws ConfigError naming --names otherwise.
ExportNames parse_export_names(const std::string& text);
std::string to_string(ExportNames names);

struct ExportSummary {
  std::string model;              ///< registry name of the network
  std::int64_t tensors = 0;       ///< the network's tensors in the dict (each once)
  std::int64_t aliases = 0;       ///< further keys of the same tensors (the reference's aliases)
  std::int64_t renamed = 0;       ///< tensors whose reference name differs from voxfit's (0 for kVoxfit)
  std::int64_t kept = 0;          ///< tensors of a reference-named model left with voxfit's name
  std::filesystem::path sidecar;  ///< the metadata file written beside `output`
};

/// The sidecar beside `output`: the same name with the extension ".json" (weights.pt -> weights.json).
std::filesystem::path export_sidecar_path(const std::filesystem::path& output);

/// Rebuilds the network of `checkpoint` (a voxfit train best.pt / last.pt), loads its weights and
/// writes `output` (torch::pickle_save of the dict, atomically) and its sidecar JSON: model,
/// model parameters, channels, classes, patch, name style, the reference's class and arguments
/// where one corresponds ("reference"; "monai" too for MONAI's), voxfit version, the checkpoint's step and best Dice. Throws IoError naming the
/// checkpoint when it is missing or unreadable, and naming `output` when its folder does not exist.
ExportSummary export_state_dict(const std::filesystem::path& checkpoint, const std::filesystem::path& output,
                                ExportNames names = ExportNames::kReference);

}  // namespace voxfit::train
