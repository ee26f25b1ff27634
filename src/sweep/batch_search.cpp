#include "voxfit/sweep/batch_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

namespace voxfit::sweep {

std::int64_t MemoryFit::predict(double usable) const {
  if (usable <= static_bytes) return 0;
  if (per_sample_bytes <= 0) return 0;
  return static_cast<std::int64_t>(std::floor((usable - static_bytes) / per_sample_bytes));
}

MemoryFit fit_memory(const std::vector<Probe>& probes) {
  std::map<std::int64_t, double> peak;  // one point per batch
  for (const auto& p : probes)
    if (p.fits) peak[p.batch] = static_cast<double>(p.peak_reserved);
  MemoryFit f;
  f.points = static_cast<int>(peak.size());
  if (peak.empty()) return f;
  if (peak.size() == 1) {
    f.static_bytes = peak.begin()->second;
    return f;
  }
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double n = static_cast<double>(peak.size());
  for (const auto& [b, y] : peak) {
    const double x = static_cast<double>(b);
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  f.per_sample_bytes = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  f.static_bytes = (sy - f.per_sample_bytes * sx) / n;
  return f;
}

namespace {
// A fitting probe whose peak is within this fraction of the budget is at the cap.
constexpr double kNearCap = 0.95;
}  // namespace

SearchResult find_max_batch(const ProbeFn& probe, const SearchOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  SearchResult r;
  std::int64_t lo = 0;                // largest batch seen fitting
  std::int64_t hi = o.max_batch + 1;  // smallest batch seen failing (or past the cap)
  const auto run = [&](std::int64_t b) {
    r.probes.push_back(probe(b));
    const Probe& p = r.probes.back();
    if (p.fits)
      lo = std::max(lo, b);
    else
      hi = std::min(hi, b);
    return p.fits;
  };
  for (std::int64_t b : o.fit_batches) {
    if (b <= lo || b >= hi) continue;
    if (!run(b)) break;
  }
  const double usable = static_cast<double>(o.usable_bytes);
  const auto bisect = [&] { return lo + (hi - lo) / 2; };
  const auto step_up = [&] { return std::min(o.max_batch, lo + std::max<std::int64_t>(1, lo / 8)); };
  bool first = true;
  while (hi - lo > 1) {
    std::vector<Probe> fitted;  // largest batch first
    for (const auto& p : r.probes)
      if (p.fits) fitted.push_back(p);
    std::sort(fitted.begin(), fitted.end(), [](const Probe& a, const Probe& b) { return a.batch > b.batch; });
    // Predict from the two largest batches that fitted: the local slope follows memory that is not
    // quite linear in the batch much better than a fit through every point.
    const MemoryFit local = fit_memory({fitted.begin(), fitted.begin() + std::min<std::size_t>(2, fitted.size())});
    const bool usable_fit = local.points >= 2 && local.per_sample_bytes > 0;
    std::int64_t next = usable_fit ? local.predict(usable) : 0;
    if (first) r.predicted = next;
    first = false;
    // Memory near the cap is elastic: as the batch grows, cuDNN's autotuner settles for algorithms
    // with smaller workspaces and the allocator gives back its cache. A probe within 5% of the cap
    // that used over half a sample less than the line through the two largest probes below the cap
    // predicts says little about where the boundary is; in the recorded H200 searches
    // (experiments/grid/results/h200) it was 0-27% above such a probe. So step up an eighth, or
    // bisect below a failure.
    std::vector<Probe> below_cap;
    for (const auto& p : fitted)
      if (static_cast<double>(p.peak_reserved) < kNearCap * usable && below_cap.size() < 2) below_cap.push_back(p);
    const MemoryFit line = fit_memory(below_cap);
    const double top_peak = fitted.empty() ? 0.0 : static_cast<double>(fitted.front().peak_reserved);
    if (top_peak >= kNearCap * usable && line.points >= 2 && line.per_sample_bytes > 0 &&
        top_peak < line.peak_at(fitted.front().batch) - 0.5 * line.per_sample_bytes) {
      next = step_up();
      run(next < hi ? next : bisect());
      continue;
    }
    // The model says the largest fitting batch is the answer: confirm by probing one above it.
    if (usable_fit) next = std::max(next, lo + 1);
    // When the model cannot place the next probe inside the open interval: a step of an eighth up
    // while no failure has been seen, else bisection.
    if (!usable_fit || next >= hi) {
      run(hi > o.max_batch ? step_up() : bisect());
      continue;
    }
    // A failing prediction close above the largest fit is checked one below, which usually closes
    // the interval; one extrapolated past twice that batch (a slope from batches 1 and 2 that
    // workspaces dominate) is not, and the next prediction or bisection goes on from it.
    const std::int64_t previous_lo = lo;
    if (!run(next) && next <= 2 * previous_lo && next - 1 > previous_lo) run(next - 1);
  }
  r.max_batch = lo;
  r.first_failing = hi <= o.max_batch ? hi : 0;
  r.fit = fit_memory(r.probes);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

std::int64_t knee_batch(const std::vector<Probe>& probes, double fraction) {
  double best = 0;
  for (const auto& p : probes)
    if (p.fits) best = std::max(best, p.samples_per_s);
  std::int64_t knee = 0;
  for (const auto& p : probes)
    if (p.fits && p.samples_per_s >= fraction * best && (knee == 0 || p.batch < knee)) knee = p.batch;
  return knee;
}

nlohmann::json to_json(const Probe& p) {
  nlohmann::json j{{"batch", p.batch}, {"fits", p.fits}, {"seconds", p.seconds}};
  if (p.setup_seconds > 0) j["setup_seconds"] = p.setup_seconds;
  if (p.fits) {
    j["first_step_seconds"] = p.first_step_seconds;
    j["peak_allocated_bytes"] = p.peak_allocated;
    j["peak_reserved_bytes"] = p.peak_reserved;
    j["samples_per_s"] = p.samples_per_s;
    if (!p.memory.is_null()) j["memory"] = p.memory;
  } else {
    j["error"] = p.error;
  }
  return j;
}

Probe probe_from_json(const nlohmann::json& j) {
  Probe p;
  p.batch = j.at("batch").get<std::int64_t>();
  p.fits = j.at("fits").get<bool>();
  p.seconds = j.at("seconds").get<double>();
  p.setup_seconds = j.value("setup_seconds", 0.0);
  if (p.fits) {
    p.first_step_seconds = j.value("first_step_seconds", 0.0);
    p.peak_allocated = j.at("peak_allocated_bytes").get<std::uint64_t>();
    p.peak_reserved = j.at("peak_reserved_bytes").get<std::uint64_t>();
    p.samples_per_s = j.at("samples_per_s").get<double>();
    p.memory = j.value("memory", nlohmann::json());
  } else {
    p.error = j.value("error", "");
  }
  return p;
}

}  // namespace voxfit::sweep
