#pragma once
// Dataset manifests: which files make up each case, which channels and which label values.
//
// Layouts (detected from what the folder holds):
//  - MSD: dataset.json with "training": [{"image": ..., "label": ...}], "modality", "labels"
//    ({"0": "background", "1": "liver"}). An image entry may be a list of files (one per channel),
//    a 4D file (one volume per modality) or a DICOM folder ("DIR" or "DIR#SERIES_UID").
//  - nnU-Net v2: dataset.json with "channel_names", "labels" ({"background": 0, "liver": 1}) and
//    "file_ending"; imagesTr/CASE_0000.ext (one file per channel) and labelsTr/CASE.ext.
//  - folder: images/NAME.ext + labels/NAME.ext, or NAME.ext + NAME_label.ext / NAME_seg.ext.
//  - HDF5 folder: *.h5 / *.hdf5 files, each with an image ([D,H,W] or [C,D,H,W]) and a label dataset.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "voxfit/io/h5_file.h"

namespace voxfit::io {

namespace fs = std::filesystem;

enum class DatasetLayout { Msd, NnUNetV2, Folder, Hdf5Folder };
std::string to_string(DatasetLayout layout);

struct CaseFiles {
  std::string id;
  /// One entry per image file: several for per-channel files, one for a 4D file, a DICOM folder or
  /// an HDF5 case file (whose channels are inside).
  std::vector<fs::path> images;
  std::optional<fs::path> label;  ///< absent for unlabelled cases
};

struct Dataset {
  fs::path root;                      ///< the folder the manifest's paths are relative to
  fs::path manifest;                  ///< dataset.json, or the folder itself
  DatasetLayout layout = DatasetLayout::Folder;
  std::string name;
  /// Channel names/modalities in channel order ("CT", "T1", "FLAIR"); empty when not declared.
  std::vector<std::string> channel_names;
  /// Declared label values and names; empty when the manifest declares none (folders).
  std::map<std::int64_t, std::string> labels;
  std::vector<CaseFiles> cases;
  H5Names h5_names;                   ///< dataset names inside HDF5 case files

  /// Channels each case should have: the declared count, else 1.
  std::size_t expected_channels() const { return channel_names.empty() ? 1 : channel_names.size(); }
};

struct DatasetOptions {
  /// Dataset names inside HDF5 case files (the HDF5-folder layout); default image/label.
  H5Names h5_names;
};

/// Reads a dataset from a dataset.json file or a folder. Throws ConfigError naming the manifest and
/// field for a malformed manifest, IoError for a folder that holds no recognisable layout. Files the
/// manifest names are not opened (missing ones are reported by check_dataset).
Dataset load_dataset(const fs::path& path, const DatasetOptions& options = {});

/// Reads every channel of a case image entry: a volume file, a 4D file, a DICOM folder or an HDF5
/// case file (its image dataset).
Channels read_case_image(const Dataset& dataset, const fs::path& image);
/// Reads a case's label map (volume file or the label dataset of an HDF5 case file).
Volume read_case_label(const Dataset& dataset, const fs::path& label);
/// All channels of a case, in channel order.
Channels read_case_channels(const Dataset& dataset, const CaseFiles& c);

}  // namespace voxfit::io
