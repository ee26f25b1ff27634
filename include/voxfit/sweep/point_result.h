#pragma once
// One point of a sweep (model x patch x precision x recompute mode x budget), as the search found
// it and the journal (results.jsonl, one to_json() a line) keeps it. The reports, the merge, `voxfit
// train --batch max` and the CLI read this type, not the JSON's keys.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "voxfit/sweep/batch_search.h"

namespace voxfit::sweep {

/// A batch that trained, timed: a row of the point's throughput table.
struct ThroughputRow {
  std::int64_t batch = 0;
  double samples_per_s = 0;
  double voxels_per_s = 0;
  std::uint64_t peak_allocated_bytes = 0;
  std::uint64_t peak_reserved_bytes = 0;
};

struct PointResult {
  // The point.
  std::string key;  ///< point_key(): "unetr|96x96x96|fp16|none|rtx3090"
  std::string model, patch, precision, checkpoint, budget;
  /// Set where the point was not measured (the device cannot run that precision, ...): why.
  std::string skipped;

  // How it was measured.
  std::string attention, kernels, optimizer, dataset;
  bool channels_last = false, lean_decoders = false, isolated = false;
  double lr = 0;
  /// Records of other types, as they wrote themselves: memory::BudgetReport::to_json, the
  /// allocators' settings, the provenance (versions, device, host).
  nlohmann::json budget_report, allocator, host_allocator, provenance;

  // What the search found.
  std::int64_t max_batch = 0, first_failing = 0, predicted = 0, knee_batch = 0;
  int probes = 0, resumed_probes = 0, leaks = 0;
  double seconds = 0;
  double samples_per_s = 0, voxels_per_s = 0;  ///< at the largest batch
  MemoryFit fit;                               ///< static and per-sample bytes
  double fit_error_at_max = 0;
  /// memory::MemoryBreakdown::to_json at batch 1 ("batch_1") and at the largest batch ("max_batch").
  nlohmann::json memory_breakdown;
  std::vector<Probe> probe_log;           ///< the search's probes, in the order run
  std::vector<ThroughputRow> throughput;  ///< by batch

  /// The budget's usable bytes (its report's), 0 where unknown.
  std::uint64_t usable_bytes() const;
  /// The throughput row at `batch`, or null.
  const ThroughputRow* throughput_at(std::int64_t batch) const;

  nlohmann::json to_json() const;
  /// The inverse of to_json, for journals of every voxfit version that wrote one: a key an older
  /// version did not write takes its default. Throws nlohmann::json's errors on a wrong type.
  static PointResult from_json(const nlohmann::json& j);
};

}  // namespace voxfit::sweep
