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
#include <torch/types.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "voxfit/core/volume.h"
#include "voxfit/data/plan.h"
#include "voxfit/io/dataset.h"
#include "voxfit/io/dataset_check.h"

namespace voxfit::data {

struct PrepareOptions {
  /// Target spacing (x, y, z) in mm; default: the per-axis median of the training cases.
  std::optional<std::array<double, 3>> spacing;
  /// "auto" (CT channels -> ct, others -> zscore), "ct" or "zscore" for every channel.
  std::string normalisation = "auto";
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

/// Validates the dataset (throws DataError listing the problems, as `voxfit data check` would),
/// then preprocesses every labelled case into `cache_dir`.
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
