#pragma once
// The max-batch search: measure peak memory at small batches, fit static + per-sample bytes,
// predict the largest batch for the budget, then verify by real training probes around the
// prediction until batch b fits and b + 1 runs out of memory. The answer is always a boundary seen
// by actual runs, never an extrapolation.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace voxfit::sweep {

/// What one probe (a few real training steps at one batch size) found.
struct Probe {
  std::int64_t batch = 0;
  bool fits = false;
  std::uint64_t peak_allocated = 0;  ///< bytes (fitting probes)
  std::uint64_t peak_reserved = 0;   ///< bytes; what the budget caps
  double samples_per_s = 0;          ///< median over the timed steps (fitting probes)
  double seconds = 0;                ///< wall time of the probe
  double setup_seconds = 0;          ///< of which drawing the batch and building network + optimiser
  double first_step_seconds = 0;     ///< of which the first step (cuDNN autotuning, lazy workspaces)
  std::string error;                 ///< the OOM message of a failing probe
  /// memory::MemoryBreakdown::to_json() of the probe's steps (fitting probes; null where unknown).
  nlohmann::json memory;
};

/// Runs a probe at `batch`; must recover fully from an OOM before returning fits = false.
using ProbeFn = std::function<Probe(std::int64_t batch)>;

/// The largest batch any search probes unless told otherwise (`voxfit train --batch max`, a sweep's
/// --max-batch default): far above what a 3D network trains at on any card.
inline constexpr std::int64_t kMaxBatchCap = 4096;

/// Linear memory model: peak = static_bytes + per_sample_bytes * batch (least squares).
struct MemoryFit {
  double static_bytes = 0;
  double per_sample_bytes = 0;
  int points = 0;
  /// Largest batch whose predicted peak is within `usable` (0 when not even 1 is).
  std::int64_t predict(double usable) const;
  double peak_at(std::int64_t batch) const { return static_bytes + per_sample_bytes * static_cast<double>(batch); }
};
/// Fits the fitting probes' peak_reserved. Needs two distinct batches (points < 2: slope 0).
MemoryFit fit_memory(const std::vector<Probe>& probes);

struct SearchOptions {
  std::uint64_t usable_bytes = 0;               ///< the budget's cap on tensor memory (for the prediction)
  std::vector<std::int64_t> fit_batches{1, 2};  ///< measured first, to fit the model
  std::int64_t max_batch = kMaxBatchCap;        ///< never probe above this (a budget larger than needed)
};

struct SearchResult {
  std::int64_t max_batch = 0;      ///< largest batch that fitted (0: not even batch 1)
  std::int64_t first_failing = 0;  ///< max_batch + 1, seen failing (0 if max_batch hit the cap)
  std::int64_t predicted = 0;      ///< the fit's first prediction
  MemoryFit fit;                   ///< from every fitting probe at the end
  std::vector<Probe> probes;       ///< in the order run
  double seconds = 0;              ///< wall time of the whole search
};

/// The search. Probes each batch at most once.
SearchResult find_max_batch(const ProbeFn& probe, const SearchOptions& options);

/// The smallest batch whose throughput reaches `fraction` of the best among `probes` that fit.
std::int64_t knee_batch(const std::vector<Probe>& probes, double fraction = 0.95);

nlohmann::json to_json(const Probe& p);
/// The inverse of to_json (an isolated probe's answer); throws nlohmann::json's errors on a bad one.
Probe probe_from_json(const nlohmann::json& j);

}  // namespace voxfit::sweep
