#include "voxfit/sweep/sweep.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/error.h"
#include "voxfit/core/provenance.h"
#include "voxfit/core/units.h"
#include "voxfit/data/plan.h"
#include "voxfit/kernels/conv_of_concat.h"
#include "voxfit/kernels/instance_norm_act.h"
#include "voxfit/sweep/journal.h"
#include "voxfit/sweep/report.h"
#include "voxfit/train/optimizer.h"
#include "voxfit/train/precision.h"

namespace voxfit::sweep {

namespace fs = std::filesystem;
using nlohmann::json;

std::string point_key(const std::string& model, const std::vector<std::int64_t>& patch, train::Precision precision,
                      models::CheckpointMode checkpoint, const memory::BudgetSpec& budget) {
  return model + "|" + shape_text(patch) + "|" + train::to_string(precision) + "|" + models::to_string(checkpoint) +
         "|" + budget.label();
}

namespace {

// The fitting probes by batch, each with samples/s, voxels/s and peaks.
std::vector<ThroughputRow> throughput_rows(std::vector<Probe> timed, std::int64_t voxels) {
  std::sort(timed.begin(), timed.end(), [](const Probe& a, const Probe& b) { return a.batch < b.batch; });
  std::vector<ThroughputRow> rows;
  for (const auto& p : timed)
    if (p.fits)
      rows.push_back(
          {p.batch, p.samples_per_s, p.samples_per_s * static_cast<double>(voxels), p.peak_allocated, p.peak_reserved});
  return rows;
}

// The breakdowns the report draws: at batch 1 and at the largest batch that fit.
json breakdowns_of(const SearchResult& r) {
  json breakdowns = json::object();
  for (const auto& p : r.probes)
    if (p.fits && !p.memory.is_null() && (p.batch == 1 || p.batch == r.max_batch))
      breakdowns[p.batch == r.max_batch ? "max_batch" : "batch_1"] = p.memory;
  if (r.max_batch == 1 && breakdowns.contains("max_batch")) breakdowns["batch_1"] = breakdowns["max_batch"];
  return breakdowns;
}

}  // namespace

PointResult search_point(const data::Plan& plan, std::shared_ptr<const data::CacheIndex> index,
                         const ProbeOptions& probe, const memory::BudgetSpec& budget, std::int64_t max_batch,
                         bool throughput_table, const IsolatedProbe& isolated, const fs::path& probe_journal,
                         const std::function<void(const std::string&)>& progress) {
  if (budget.kind == memory::BudgetKind::None)
    throw ConfigError("a max-batch search needs a budget (--vram SIZE or --card ID)");
  // In this process: the budget installed here and one TrainingProbe for every probe. Isolated:
  // each probe's own process installs the budget (it alone touches the device) and reports it.
  std::optional<memory::ScopedBudget> scoped;
  std::optional<TrainingProbe> in_process;
  ProbeFn prober;
  json budget_report;
  if (isolated) {
    budget_report = isolated(0).at("budget_report");
    prober = [&isolated](std::int64_t b) {
      const auto t0 = std::chrono::steady_clock::now();
      Probe p = probe_from_json(isolated(b).at("probe"));
      p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();  // with the start-up
      return p;
    };
  } else {
    scoped.emplace(budget, probe.device);
    in_process.emplace(std::move(index), probe);
    budget_report = scoped->report().to_json();
    prober = std::ref(*in_process);
  }
  SearchOptions so;
  so.usable_bytes = budget_report.at("usable_bytes").get<std::uint64_t>();
  so.max_batch = max_batch;
  const std::string key =
      point_key(probe.model, probe.model_context.patch, probe.step.precision, probe.model_context.checkpoint, budget);
  int resumed = 0;
  double resumed_seconds = 0;
  if (!probe_journal.empty()) {
    std::map<std::int64_t, Probe> recorded;
    for (const auto& e : read_journal(probe_journal)) {
      if (e.value("key", "") != key || e.value("usable_bytes", std::uint64_t{0}) != so.usable_bytes) continue;
      try {
        const Probe p = probe_from_json(e.at("probe"));
        recorded[p.batch] = p;
      } catch (const json::exception&) {
        // not a probe this version wrote: measured again
      }
    }
    prober = [measure = std::move(prober), recorded = std::move(recorded), &resumed, &resumed_seconds, &key,
              &probe_journal, usable = so.usable_bytes](std::int64_t b) {
      if (const auto it = recorded.find(b); it != recorded.end()) {
        ++resumed;
        resumed_seconds += it->second.seconds;
        return it->second;
      }
      Probe p = measure(b);
      append_line_durable(probe_journal, json{{"key", key}, {"usable_bytes", usable}, {"probe", to_json(p)}}.dump());
      return p;
    };
  }
  if (progress)
    prober = [measure = std::move(prober), &progress](std::int64_t b) {
      const Probe p = measure(b);
      char line[160];
      std::snprintf(line, sizeof line, "  probe batch %lld: %s, %.2f samples/s, peak %s reserved (%.1f s)",
                    static_cast<long long>(b), p.fits ? "fits" : "out of memory", p.samples_per_s,
                    format_bytes(p.peak_reserved).c_str(), p.seconds);
      progress(line);
      return p;
    };
  SearchResult r = find_max_batch(prober, so);

  std::vector<Probe> timed = r.probes;
  if (throughput_table) {
    std::set<std::int64_t> done;
    for (const auto& p : r.probes) done.insert(p.batch);
    for (std::int64_t b = 1; b < r.max_batch; b *= 2)
      if (!done.count(b)) timed.push_back(prober(b));
  }
  PointResult e;
  e.key = key;
  e.model = probe.model;
  e.patch = shape_text(probe.model_context.patch);
  e.precision = train::to_string(probe.step.precision);
  e.checkpoint = models::to_string(probe.model_context.checkpoint);
  e.attention = models::to_string(probe.model_context.attention);
  e.channels_last = probe.model_context.channels_last;
  e.kernels = kernels::to_string(kernels::kernel_mode());
  e.lean_decoders = kernels::lean_decoders();
  e.optimizer = train::to_string(probe.step.optimizer.kind);
  e.lr = probe.step.optimizer.lr;
  e.budget = budget.label();
  e.budget_report = budget_report;
  e.allocator = memory::cuda_allocator_settings();
  e.host_allocator = memory::host_allocator_settings();
  e.dataset = plan.dataset_name;
  e.provenance = provenance(probe.device);
  e.max_batch = r.max_batch;
  e.first_failing = r.first_failing;
  e.predicted = r.predicted;
  e.probes = static_cast<int>(r.probes.size());
  e.seconds = r.seconds + resumed_seconds;  // the resumed probes' time counts
  e.resumed_probes = resumed;
  e.throughput = throughput_rows(timed, patch_voxels(probe.model_context.patch));
  if (const auto* at_max = e.throughput_at(r.max_batch)) {
    e.samples_per_s = at_max->samples_per_s;
    e.voxels_per_s = at_max->voxels_per_s;
  }
  e.knee_batch = knee_batch(timed);
  e.fit = r.fit;
  double measured_peak = 0;
  for (const auto& p : r.probes)
    if (p.fits && p.batch == r.max_batch) measured_peak = static_cast<double>(p.peak_reserved);
  e.fit_error_at_max = measured_peak > 0 ? (r.fit.peak_at(r.max_batch) - measured_peak) / measured_peak : 0.0;
  e.leaks = in_process ? in_process->leaks() : 0;
  e.isolated = static_cast<bool>(isolated);
  e.memory_breakdown = breakdowns_of(r);
  e.probe_log = r.probes;
  return e;
}

json run_probe_here(std::shared_ptr<const data::CacheIndex> index, const ProbeOptions& probe,
                    const memory::BudgetSpec& budget, std::int64_t batch) {
  memory::ScopedBudget scoped(budget, probe.device);
  json out{{"budget_report", scoped.report().to_json()}};
  if (batch >= 1) out["probe"] = to_json(TrainingProbe(std::move(index), probe)(batch));
  return out;
}

namespace {

// The probe settings of one grid point: the sweep's, with this point's network, patch, precision
// and checkpointing, the plan's channels and classes, and the optimiser the run options give
// this network.
ProbeOptions point_probe(const SweepOptions& o, const data::Plan& plan, const std::string& model,
                         const std::vector<std::int64_t>& patch, train::Precision precision,
                         models::CheckpointMode checkpoint) {
  ProbeOptions p = o.probe;
  p.model = model;
  p.model_context.patch = patch;
  p.model_context.checkpoint = checkpoint;
  p.model_context.in_channels = plan.channels();
  p.model_context.num_classes = plan.num_classes();
  p.model_context.params.clear();
  const auto params = o.model_params.find(model);
  if (params != o.model_params.end()) p.model_context.params = params->second;
  const auto layout = o.channels_last.find(model);
  p.model_context.channels_last = layout != o.channels_last.end() && layout->second;
  p.step.channels_last = p.model_context.channels_last;
  p.step.precision = precision;
  const auto optimizer = o.optimizers.find(model);
  p.step.optimizer = optimizer != o.optimizers.end()
                         ? optimizer->second
                         : train::OptimizerOptions::defaults_for(train::default_optimizer(model));
  return p;
}

// One point of the grid.
struct GridPoint {
  const std::string& model;
  const std::vector<std::int64_t>& patch;
  train::Precision precision;
  models::CheckpointMode checkpoint;
  const memory::BudgetSpec& budget;
  std::string key() const { return point_key(model, patch, precision, checkpoint, budget); }
};

// The grid's points in its one order (models, then patches, precisions, checkpointing, budgets),
// which shard indices and journals refer to.
std::vector<GridPoint> grid_points(const SweepGrid& g) {
  std::vector<GridPoint> out;
  for (const auto& model : g.models)
    for (const auto& patch : g.patches)
      for (const auto precision : g.precisions)
        for (const auto checkpoint : g.checkpointing)
          for (const auto& budget : g.budgets) out.push_back({model, patch, precision, checkpoint, budget});
  return out;
}

// The cases a sweep's probes draw from: the training part of the split `voxfit train` makes.
std::shared_ptr<const data::CacheIndex> training_cases(const data::Plan& plan, const SweepOptions& o) {
  return data::CacheIndex::load(plan, data::run_split(plan, o.validation_fraction, o.probe.seed, o.fold).train);
}

}  // namespace

json run_sweep_probe(const SweepOptions& o, const std::string& key, std::int64_t batch) {
  const data::Plan plan = data::load_plan(o.cache_dir);
  for (const auto& g : grid_points(o.grid))
    if (g.key() == key)
      return run_probe_here(training_cases(plan, o), point_probe(o, plan, g.model, g.patch, g.precision, g.checkpoint),
                            g.budget, batch);
  throw ConfigError("sweep probe: the grid has no point '" + key + "'");
}

void run_sweep(const SweepOptions& o, const std::function<void(const PointResult&)>& on_point) {
  if (o.grid.budgets.empty()) throw ConfigError("sweep: no budgets (--budgets rtx3090,a40 or sizes like 24GiB)");
  fs::create_directories(o.output_dir);
  const fs::path journal = o.output_dir / "results.jsonl";
  // The probes of the point in progress, so that a sweep stopped mid-search keeps them.
  const fs::path probe_journal = o.output_dir / "probes.jsonl";
  std::set<std::string> done;
  for (const auto& e : read_journal(journal)) done.insert(e.value("key", ""));

  const data::Plan plan = data::load_plan(o.cache_dir);
  const auto index = training_cases(plan, o);
  if (o.shards < 1 || o.shard >= o.shards)
    throw ConfigError("sweep shard " + std::to_string(o.shard) + "/" + std::to_string(o.shards) + ": out of range");
  const auto points = grid_points(o.grid);
  std::vector<std::size_t> todo;
  for (std::size_t i = o.shard; i < points.size(); i += o.shards)
    if (!done.count(points[i].key())) todo.push_back(i);
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t n = 0; n < todo.size(); ++n) {
    const GridPoint& g = points[todo[n]];
    const std::string key = g.key();
    if (o.progress) {
      // The time left: the mean point so far times the points left (no estimate before the first).
      const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      o.progress(
          "point " + std::to_string(n + 1) + "/" + std::to_string(todo.size()) + " " + key +
          (n > 0 ? ", ETA " + format_duration(spent / static_cast<double>(n) * static_cast<double>(todo.size() - n))
                 : std::string()));
    }
    const ProbeOptions p = point_probe(o, plan, g.model, g.patch, g.precision, g.checkpoint);
    PointResult entry;
    try {
      entry = search_point(plan, index, p, g.budget, o.max_batch, o.throughput_table,
                           o.isolate ? o.isolate(key) : IsolatedProbe{}, probe_journal, o.progress);
    } catch (const UnsupportedError& e) {
      entry.key = key;
      entry.model = g.model;
      entry.patch = shape_text(g.patch);
      entry.precision = train::to_string(g.precision);
      entry.checkpoint = models::to_string(g.checkpoint);
      entry.budget = g.budget.label();
      entry.skipped = e.what();
    }
    append_line_durable(journal, entry.to_json().dump());
    forget_probes(probe_journal, key);  // the point is in the journal now
    // Reports after every point: a sweep stopped midway still leaves a current summary.
    write_reports(read_results(journal), o.output_dir);
    if (on_point) on_point(entry);
  }
  write_reports(read_results(journal), o.output_dir);
}

std::size_t grid_size(const SweepGrid& g) { return grid_points(g).size(); }

}  // namespace voxfit::sweep
