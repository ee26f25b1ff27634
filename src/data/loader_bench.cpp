#include "voxfit/data/loader_bench.h"

#include <chrono>

#include "voxfit/core/error.h"

namespace voxfit::data {

std::vector<LoaderBenchRow> bench_loader(const std::filesystem::path& cache_dir, const LoaderBenchOptions& o,
                                         const std::function<void(const LoaderBenchRow&)>& on_row) {
  if (o.threads.empty()) throw ConfigError("loader bench: expected at least one thread count");
  if (!(o.seconds > 0)) throw ConfigError("loader bench: expected a positive time per row");
  const auto index = CacheIndex::load(load_plan(cache_dir), o.case_ids);
  std::vector<LoaderBenchRow> rows;
  for (int threads : o.threads) {
    LoaderOptions lo = o.loader;
    lo.threads = threads;
    PatchLoader loader(index, lo);
    for (std::int64_t i = 0; i < o.warmup_batches; ++i) loader.next();
    const LoaderStats before = loader.stats();
    const auto t0 = std::chrono::steady_clock::now();
    std::int64_t patches = 0, bytes = 0;
    double elapsed = 0.0;
    do {
      const Batch b = loader.next();
      patches += b.image.size(0);
      bytes += b.image.numel() * static_cast<std::int64_t>(b.image.element_size()) +
               b.label.numel() * static_cast<std::int64_t>(b.label.element_size());
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (elapsed < o.seconds);
    const LoaderStats after = loader.stats();
    LoaderBenchRow row;
    row.threads = threads;
    row.patches = patches;
    row.seconds = elapsed;
    row.patches_per_second = static_cast<double>(patches) / elapsed;
    row.megabytes_per_second = static_cast<double>(bytes) / elapsed / 1e6;
    row.worker_busy = (after.worker_seconds - before.worker_seconds) / (elapsed * threads);
    if (on_row) on_row(row);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace voxfit::data
