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

SearchResult find_max_batch(const ProbeFn& probe, const SearchOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  SearchResult r;
  std::int64_t lo = 0;                 // largest batch seen fitting
  std::int64_t hi = o.max_batch + 1;   // smallest batch seen failing (or past the cap)
  const auto run = [&](std::int64_t b) {
    r.probes.push_back(probe(b));
    const Probe& p = r.probes.back();
    if (p.fits) lo = std::max(lo, b);
    else hi = std::min(hi, b);
    return p.fits;
  };
  for (std::int64_t b : o.fit_batches) {
    if (b <= lo || b >= hi) continue;
    if (!run(b)) break;
  }
  const double usable = static_cast<double>(o.usable_bytes);
  bool first = true;
  while (hi - lo > 1) {
    // Predict from the two largest batches that fitted: the local slope follows memory that is not
    // quite linear in the batch much better than a fit through every point.
    std::vector<Probe> fitted;
    for (const auto& p : r.probes)
      if (p.fits) fitted.push_back(p);
    std::sort(fitted.begin(), fitted.end(), [](const Probe& a, const Probe& b) { return a.batch > b.batch; });
    if (fitted.size() > 2) fitted.resize(2);
    const MemoryFit fit = fit_memory(fitted);
    const bool usable_fit = fit.points >= 2 && fit.per_sample_bytes > 0;
    std::int64_t next = usable_fit ? fit.predict(usable) : 0;
    if (first) r.predicted = next;
    first = false;
    // The model says the largest fitting batch is the answer: confirm by probing one above it.
    if (usable_fit) next = std::max(next, lo + 1);
    // When the model cannot place the next probe inside the open interval: a step of an eighth up
    // while no failure has been seen, else bisection. Near the cap the local slope flattens or turns
    // negative (the allocator and cuDNN give back what they can), and the boundary is then usually
    // close: on the recorded H200 searches an eighth saves a probe where a quarter overshoots.
    if (!usable_fit || next >= hi) {
      next = hi > o.max_batch ? std::min(o.max_batch, lo + std::max<std::int64_t>(1, lo / 8)) : lo + (hi - lo) / 2;
      run(next);
      continue;
    }
    // A slope measured at small batches, extrapolated far, misses where memory curves (allocator
    // rounding, fragmentation, per-sample workspaces): first measure just below the prediction,
    // so that the next prediction extrapolates over a short distance only.
    if (next > 2 * lo) {
      const std::int64_t approach = std::max(lo + 1, static_cast<std::int64_t>(0.9 * static_cast<double>(next)));
      if (approach < next) {
        run(approach);
        continue;
      }
    }
    // A failing prediction is checked one below, which usually closes the interval; a fitting
    // one is followed by the next prediction from the new largest pair.
    const std::int64_t previous_lo = lo;
    if (!run(next) && next - 1 > previous_lo) run(next - 1);
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
  } else {
    p.error = j.value("error", "");
  }
  return p;
}

}  // namespace voxfit::sweep
