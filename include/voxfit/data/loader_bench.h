#pragma once
// How fast the patch loader delivers, per worker-thread count (`voxfit data bench`).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "voxfit/data/patch_loader.h"

namespace voxfit::data {

struct LoaderBenchOptions {
  LoaderOptions loader;                     ///< patch, batch, augmentation, seed (threads is overridden)
  std::vector<int> threads{1, 2, 4, 8, 16};  ///< one row per count
  double seconds = 5.0;                     ///< timed per row, after the warm-up
  std::int64_t warmup_batches = 2;          ///< taken before timing (fills the queue's pipeline)
  std::vector<std::string> case_ids;        ///< empty: every case of the cache
};

struct LoaderBenchRow {
  int threads = 0;
  std::int64_t patches = 0;
  double seconds = 0.0;
  double patches_per_second = 0.0;
  double megabytes_per_second = 0.0;  ///< image + label bytes handed out
  double worker_busy = 0.0;           ///< share of the workers' time spent making batches
};

/// Runs the loader for each thread count and measures patches/s as a consumer that takes batches
/// as fast as they come would see them. `on_row` (if set) sees each row when it is done.
std::vector<LoaderBenchRow> bench_loader(const std::filesystem::path& cache_dir, const LoaderBenchOptions& options,
                                         const std::function<void(const LoaderBenchRow&)>& on_row = {});

}  // namespace voxfit::data
