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
//
// Declared splits (the first found wins):
//  - MONAI's decathlon datalist: an MSD dataset.json with a "validation" list of {image, label}
//    beside "training": one fold, "training" trains and "validation" validates.
//  - nnU-Net's splits_final.json in the dataset's folder (beside dataset.json): a list of folds
//    [{"train": [ids], "val": [ids]}, ...] of nnU-Net case ids (the file stem without _0000.ext),
//    which are voxfit's case ids of nnU-Net v2 and MSD datasets.
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

/// One fold of a declared split: case ids (CaseFiles::id).
struct DeclaredFold {
  std::vector<std::string> train;
  std::vector<std::string> validation;
};

struct DeclaredSplits {
  std::string source;  ///< "validation list" (dataset.json's "validation") or "splits_final.json"
  fs::path file;       ///< the file it was read from
  std::vector<DeclaredFold> folds;
};

struct Dataset {
  fs::path root;      ///< the folder the manifest's paths are relative to
  fs::path manifest;  ///< dataset.json, or the folder itself
  DatasetLayout layout = DatasetLayout::Folder;
  std::string name;
  /// Channel names/modalities in channel order ("CT", "T1", "FLAIR"); empty when not declared.
  std::vector<std::string> channel_names;
  /// Declared label values and names; empty when the manifest declares none (folders).
  std::map<std::int64_t, std::string> labels;
  std::vector<CaseFiles> cases;
  H5Names h5_names;                      ///< dataset names inside HDF5 case files
  std::optional<DeclaredSplits> splits;  ///< the split the dataset declares, if any

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

/// Reads nnU-Net's splits_final.json: folds of case ids, each id one of `case_ids`. Throws
/// ConfigError naming the file, the fold and the field or id.
DeclaredSplits read_splits_final(const fs::path& file, const std::vector<std::string>& case_ids);

/// The cases of a folder of images to predict on, in name order. nnU-Net's channel files
/// CASE_0000.ext, CASE_0001.ext, ... are the channels of case CASE, in suffix order (a name is
/// grouped only when its CASE_0000 file is there); every other image file is one case named by its
/// stem. Throws DataError naming the case and the file for a gap in the channel numbers.
std::vector<CaseFiles> image_folder_cases(const fs::path& folder);

}  // namespace voxfit::io
