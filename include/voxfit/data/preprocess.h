#pragma once
// nnU-Net-style preprocessing into an HDF5 cache, and the same steps for prediction.
//
// Per case: crop to the bounding box of non-zero voxels (over all channels), normalise each channel
// (plan.h), resample to the target spacing (linear for images, nearest for labels, ITK), map label
// values to class indices 0..K-1, and store CACHE/cases/ID.h5:
//   image        float32 [C, D, H, W], chunked, with geometry attributes of the preprocessed grid
//   label        uint8 (int16 when K > 255) [D, H, W], class indices
//   fg_locations int32 [N, 3] (z, y, x) voxels of each foreground class, at most
//                foreground_samples_per_class per class, sampled uniformly
//   fg_offsets   int64 [K + 1]: class k's rows are fg_offsets[k] .. fg_offsets[k+1]
// plus CACHE/plan.json. A re-run whose inputs (paths, sizes, modification times) and settings are
// unchanged reuses the cache; otherwise the plan is rebuilt and only cases whose own inputs or
// preprocessing parameters changed are rewritten.
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>

#include "voxfit/core/volume.h"
#include "voxfit/data/plan.h"
#include "voxfit/io/dataset.h"
#include "voxfit/io/dataset_check.h"

namespace voxfit::data {

struct PrepareOptions {
  /// Target spacing (x, y, z) in mm; default: the per-axis median of the training cases.
  std::optional<std::array<double, 3>> spacing;
  /// Every channel's scheme; unset: auto (channels named CT -> ct, others -> zscore).
  std::optional<Normalisation> normalisation;
  /// Foreground voxel locations kept per class and case (nnU-Net keeps 10,000).
  std::int64_t foreground_samples_per_class = 10000;
  /// Foreground intensities sampled per case and channel for the CT statistics.
  std::int64_t intensity_samples_per_case = 100000;
  /// Chunk edge (voxels) of the cached volumes; a patch read touches only the chunks it overlaps.
  std::int64_t chunk = 64;
  /// gzip level of the cache (0 = none, the default: see H5DatasetOptions).
  int gzip_level = 0;
  /// Rebuild every case even when the cache is up to date.
  bool force = false;
  /// Seeds the sampling of foreground locations and intensities (same seed, same cache).
  std::uint64_t seed = 1234;
  io::CheckOptions check;
  /// Called with one line per step ("case_01: written"), if set.
  std::function<void(const std::string&)> progress;
};

struct PrepareResult {
  Plan plan;
  bool up_to_date = false;  ///< the cache was reused as it was, nothing read
  std::size_t cases_written = 0;
  std::size_t cases_reused = 0;
};

/// Foreground intensity statistics of a CT channel over the training cases (nnU-Net's).
struct CtIntensity {
  double lower = 0, upper = 0;  ///< 0.5 and 99.5 percentiles
  double mean = 0, std = 1;
};

/// Stage 1, nnU-Net's fingerprint: every case read and checked (a DataError names the problems as
/// `voxfit data check` would), and what the plan needs from them: per case its id and spacing, the
/// label values present, per CT channel the foreground intensity statistics (sampled with the
/// options' seed). prepare_dataset writes it to CACHE/fingerprint.json (to_json).
struct DatasetFingerprint {
  std::vector<std::string> case_ids;
  std::vector<std::array<double, 3>> spacings;  ///< per case, (x, y, z) mm
  std::set<std::int64_t> label_values;
  std::size_t channels = 0;
  std::vector<std::optional<CtIntensity>> ct;  ///< per channel; set for the channels normalised as CT
};
DatasetFingerprint fingerprint_dataset(const io::Dataset& dataset, const PrepareOptions& options);
nlohmann::json to_json(const DatasetFingerprint& fingerprint);

/// Stage 2, the plan: target spacing (the options' or the median), each channel's normalisation,
/// the classes. Its cases and input fingerprint are left empty for stage 3 and the caller.
Plan plan_dataset(const io::Dataset& dataset, const DatasetFingerprint& fingerprint, const PrepareOptions& options,
                  const fs::path& cache_dir);

/// Stage 3: writes CACHE/cases/ID.h5 for every case whose inputs or preprocessing parameters
/// changed, reuses the others (counted in `result`), fills plan.cases and removes case files of
/// cases no longer in the dataset.
void write_cases(const io::Dataset& dataset, Plan& plan, const PrepareOptions& options, PrepareResult& result);

/// The three stages (fingerprint.json, the cases, plan.json last) unless the cache is up to date.
PrepareResult prepare_dataset(const io::Dataset& dataset, const fs::path& cache_dir,
                              const PrepareOptions& options = {});

/// A whole preprocessed case, for validation.
struct PreprocessedCase {
  std::string id;
  torch::Tensor image;  ///< float32 [C, D, H, W]
  torch::Tensor label;  ///< int64 [D, H, W], class indices 0..K-1
  Geometry geometry;    ///< of the preprocessed grid
};
PreprocessedCase read_case(const Plan& plan, const std::string& id);

/// A new image preprocessed like the training cases, with what is needed to map a prediction back.
struct InferenceInput {
  torch::Tensor image;  ///< float32 [C, D, H, W] on the plan's grid
  Geometry geometry;    ///< of `image`
  std::array<std::int64_t, 3> original_size{};  ///< (x, y, z)
  Geometry original_geometry;
  std::array<std::int64_t, 3> crop_begin{};  ///< (x, y, z) of the non-zero crop in the original
  std::array<std::int64_t, 3> crop_size{};
};

/// Crop, normalise and resample channels (in the plan's channel order, same grid) as prepare did.
InferenceInput preprocess_for_inference(const Plan& plan, const Channels& channels);

/// Maps a predicted class map on the preprocessed grid ([D, H, W], class indices) back onto the
/// original grid: nearest resampling onto the cropped region, background outside it, class indices
/// turned into the dataset's label values. The Volume has the original geometry (uint8 labels, or
/// int16/int32 when values need it), ready for io::write_volume.
Volume restore_prediction(const Plan& plan, const InferenceInput& input, const torch::Tensor& class_map);

}  // namespace voxfit::data
