#pragma once
// Random training patches from a prepared cache, made by worker threads into a bounded queue.
//
// Determinism: sample j of batch i is a function of (seed, i, j) alone: its worker seeds a generator
// from the three, and next() hands batches out in index order. So a seed gives the same stream of batches for any
// thread count (and prefetch depth).
#include <torch/types.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "voxfit/data/plan.h"

namespace voxfit::data {

struct Batch {
  torch::Tensor image;  ///< float32 [B, C, D, H, W]
  torch::Tensor label;  ///< int64 [B, 1, D, H, W], class indices 0..K-1
};

/// Per-patch augmentation done on the CPU by the workers (nnU-Net's defaults). Rotation and scaling
/// are not here: they run on the whole batch on its device (spatial_augment.h).
struct AugmentOptions {
  bool enabled = true;                  ///< master switch for everything below
  double flip_probability = 0.1;        ///< mirror each axis with this probability (MONAI's BTCV 0.1; nnU-Net 0.5)
  bool intensity = true;                ///< the scale, shift, gamma and noise below
  double scale_probability = 0.15;      ///< multiply a channel by U(scale_range)
  std::array<double, 2> scale_range{0.75, 1.25};
  double shift_probability = 0.15;      ///< add U(shift_range) to a channel
  std::array<double, 2> shift_range{-0.1, 0.1};
  double gamma_probability = 0.3;       ///< gamma U(gamma_range) on the channel's min-max range, mean/std kept
  std::array<double, 2> gamma_range{0.7, 1.5};
  double noise_probability = 0.1;       ///< add N(0, s^2) noise, s^2 ~ U(0, noise_variance)
  double noise_variance = 0.1;
};

struct LoaderOptions {
  std::array<std::int64_t, 3> patch{96, 96, 96};  ///< patch size (D, H, W) in voxels
  std::int64_t batch_size = 2;
  int threads = 4;                  ///< worker threads (at least 1)
  int prefetch = 0;                 ///< batches made ahead of the consumer; 0 = threads + 2
  double oversample_foreground = 0.33;  ///< chance that a patch is centred on a foreground voxel
  AugmentOptions augment;
  std::uint64_t seed = 0;
  bool pin_memory = true;           ///< page-locked batches when CUDA is available (ignored otherwise)
  std::size_t open_files = 32;      ///< case files kept open at once (each with a 32 MiB chunk cache)
  /// Index of the first batch handed out: a run resumed at step s starts at batch s and so sees
  /// the batches an uninterrupted run would have.
  std::int64_t first_batch = 0;
  /// Data parallelism: this loader makes samples [shard * batch_size, (shard + 1) * batch_size) of
  /// each global batch of shards * batch_size samples. Each sample is a function of (seed, batch
  /// index, its place in the global batch), so the ranks of a job read disjoint patches and
  /// together see exactly what one process with the global batch would.
  int shard = 0;
  int shards = 1;
};

/// What next() and the workers have done so far.
struct LoaderStats {
  std::int64_t batches = 0;              ///< handed out by next()
  std::int64_t patches = 0;
  std::int64_t oversampled_patches = 0;  ///< centred on a foreground voxel on purpose
  std::int64_t foreground_patches = 0;   ///< with at least one foreground voxel
  double wait_seconds = 0.0;             ///< the consumer's time blocked in next()
  double worker_seconds = 0.0;           ///< summed time the workers spent making batches
};

/// The per-case facts patches need (shapes and foreground locations), read once from the cache and
/// shared by every loader built on it, so a new loader (another batch size) starts at once.
class CacheIndex {
 public:
  struct Case {
    std::string id;
    fs::path file;
    std::array<std::int64_t, 4> shape{};  ///< (C, D, H, W)
    /// The label's stored type: patches are read in it, so that raw datasets are plain copies.
    torch::ScalarType label_dtype = torch::kInt16;
    torch::Tensor fg_locations;           ///< int32 [N, 3] (z, y, x)
    std::vector<std::int64_t> fg_offsets;  ///< K + 1
    std::vector<int> present_classes;     ///< foreground classes with at least one location
  };
  /// Reads the cases (all of the plan's when `case_ids` is empty). Throws IoError naming a bad file.
  static std::shared_ptr<const CacheIndex> load(const Plan& plan, const std::vector<std::string>& case_ids = {});
  const Plan& plan() const { return plan_; }
  const std::vector<Case>& cases() const { return cases_; }

 private:
  Plan plan_;
  std::vector<Case> cases_;
};

class PatchLoader {
 public:
  PatchLoader(std::shared_ptr<const CacheIndex> index, const LoaderOptions& options);
  /// Loads the plan and the index of `case_ids` (all cases when empty) from `cache_dir`.
  PatchLoader(const fs::path& cache_dir, const std::vector<std::string>& case_ids, const LoaderOptions& options);
  ~PatchLoader();
  PatchLoader(const PatchLoader&) = delete;
  PatchLoader& operator=(const PatchLoader&) = delete;

  /// The next batch (blocks until it is ready; endless). A worker's error is rethrown here.
  Batch next();
  LoaderStats stats() const;
  const LoaderOptions& options() const;
  const CacheIndex& index() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace voxfit::data
