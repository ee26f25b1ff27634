#pragma once
// Small builders shared by the io tests: synthetic volumes and hand-written odd files.
#include <torch/torch.h>

#include <fstream>
#include <map>
#include <string>

#include "support/test_support.h"
#include "voxfit/core/volume.h"

namespace voxfit::test {

/// A volume of `pixel` type with non-trivial geometry: anisotropic spacing, an offset origin and an
/// oblique (rotated) direction, filled with a ramp so every voxel differs from its neighbours.
inline Volume synthetic_volume(PixelType pixel, std::array<std::int64_t, 3> size = {9, 7, 5}) {
  Volume v;
  v.pixel_type = pixel;
  const auto n = size[0] * size[1] * size[2];
  torch::Tensor ramp = torch::arange(n, torch::kFloat64).remainder(100.0).view({size[2], size[1], size[0]});
  if (is_floating(pixel)) ramp = ramp * 0.25 - 7.5;
  v.data = ramp.to(tensor_dtype(pixel)).contiguous();
  v.geometry.spacing = {0.75, 1.25, 2.5};
  v.geometry.origin = {-12.5, 30.25, 7.0};
  const double c = std::cos(0.3), s = std::sin(0.3);
  v.geometry.direction = {c, -s, 0, s, c, 0, 0, 0, 1};
  return v;
}

inline void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

/// A MetaImage with NDims = dims and the given sizes (int16 zeros): a valid file that is not 3D.
inline void write_mha(const fs::path& p, const std::vector<int>& sizes) {
  std::string dim, spacing;
  std::size_t n = 1;
  for (int s : sizes) {
    dim += " " + std::to_string(s);
    spacing += " 1";
    n *= static_cast<std::size_t>(s);
  }
  std::ofstream out(p, std::ios::binary);
  out << "ObjectType = Image\nNDims = " << sizes.size() << "\nBinaryData = True\nBinaryDataByteOrderMSB = False\n"
      << "ElementSpacing =" << spacing << "\nDimSize =" << dim
      << "\nElementType = MET_SHORT\nElementDataFile = LOCAL\n";
  const std::string zeros(n * 2, '\0');
  out.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
}

/// The first `fraction` of a file's bytes, as a truncated download would leave it.
inline void write_truncated_copy(const fs::path& from, const fs::path& to, double fraction) {
  std::ifstream in(from, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes.resize(static_cast<std::size_t>(static_cast<double>(bytes.size()) * fraction));
  write_text(to, bytes);
}

}  // namespace voxfit::test

#include <nlohmann/json.hpp>

namespace voxfit::test {

/// Links `target` at `link` (a dataset folder built from the shared files without copying them).
inline void link(const fs::path& target, const fs::path& link) {
  fs::create_directories(link.parent_path());
  fs::create_symlink(target, link);
}

/// dataset.json in MSD form; `cases` are (image, label) paths relative to the folder.
inline void write_msd_manifest(const fs::path& folder, const std::vector<std::pair<std::string, std::string>>& cases,
                               const std::map<std::string, std::string>& labels,
                               const std::vector<std::string>& modalities = {"CT"}) {
  nlohmann::json j;
  j["name"] = "TestMSD";
  for (std::size_t i = 0; i < modalities.size(); ++i) j["modality"][std::to_string(i)] = modalities[i];
  j["labels"] = labels;
  j["training"] = nlohmann::json::array();
  for (const auto& [image, label] : cases) j["training"].push_back({{"image", image}, {"label", label}});
  fs::create_directories(folder);
  write_text(folder / "dataset.json", j.dump(2));
}

/// dataset.json in nnU-Net v2 form (files are laid out by the caller).
inline void write_nnunet_manifest(const fs::path& folder, const std::vector<std::string>& channels,
                                  const std::map<std::string, int>& labels, const std::string& ending = ".nii.gz") {
  nlohmann::json j;
  for (std::size_t i = 0; i < channels.size(); ++i) j["channel_names"][std::to_string(i)] = channels[i];
  j["labels"] = labels;
  j["file_ending"] = ending;
  fs::create_directories(folder);
  write_text(folder / "dataset.json", j.dump(2));
}

}  // namespace voxfit::test
