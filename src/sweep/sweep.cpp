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
#include "voxfit/core/units.h"
#include "voxfit/data/plan.h"
#include "voxfit/kernels/conv_of_concat.h"
#include "voxfit/kernels/instance_norm_act.h"
#include "voxfit/sweep/memory_report.h"
#include "voxfit/train/precision.h"

namespace voxfit::sweep {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string patch_text(const std::vector<std::int64_t>& patch) {
  std::string s;
  for (auto v : patch) s += (s.empty() ? "" : "x") + std::to_string(v);
  return s;
}

// patch_text's inverse: "96x96x96" -> {96, 96, 96}.
std::vector<std::int64_t> patch_from_text(const std::string& text) {
  std::vector<std::int64_t> patch;
  std::istringstream in(text);
  for (std::string v; std::getline(in, v, 'x');) patch.push_back(std::atoll(v.c_str()));
  return patch;
}

std::int64_t voxels(const std::vector<std::int64_t>& patch) {
  std::int64_t n = 1;
  for (auto v : patch) n *= v;
  return n;
}

std::string fixed(double v, int digits) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

// Rewrites the probe journal without the probes of `key` (removed when none is left).
void forget_probes(const fs::path& file, const std::string& key) {
  if (!fs::exists(file)) return;
  std::string kept;
  for (const auto& e : read_journal(file))
    if (e.value("key", "") != key) kept += e.dump() + "\n";
  if (kept.empty()) remove_tree(file);
  else write_file_atomic(file, kept);
}

}  // namespace

std::string point_key(const std::string& model, const std::vector<std::int64_t>& patch, train::Precision precision,
                      models::CheckpointMode checkpoint, const memory::BudgetSpec& budget) {
  return model + "|" + patch_text(patch) + "|" + train::to_string(precision) + "|" + models::to_string(checkpoint) +
         "|" + budget.label();
}

json search_point(const data::Plan& plan, std::shared_ptr<const data::CacheIndex> index, const ProbeOptions& probe,
                  const memory::BudgetSpec& budget, std::int64_t max_batch, bool throughput_table,
                  const IsolatedProbe& isolated, const fs::path& probe_journal) {
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
  const std::string key = point_key(probe.model, probe.model_context.patch, probe.step.precision,
                                    probe.model_context.checkpoint, budget);
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
  SearchResult r = find_max_batch(prober, so);
  const int search_probes = static_cast<int>(r.probes.size());

  std::vector<Probe> timed = r.probes;
  if (throughput_table) {
    std::set<std::int64_t> done;
    for (const auto& p : r.probes) done.insert(p.batch);
    for (std::int64_t b = 1; b < r.max_batch; b *= 2)
      if (!done.count(b)) timed.push_back(prober(b));
  }
  std::sort(timed.begin(), timed.end(), [](const Probe& a, const Probe& b) { return a.batch < b.batch; });
  json throughput = json::array();
  double at_max = 0;
  for (const auto& p : timed) {
    if (!p.fits) continue;
    throughput.push_back({{"batch", p.batch},
                          {"samples_per_s", p.samples_per_s},
                          {"voxels_per_s", p.samples_per_s * static_cast<double>(voxels(probe.model_context.patch))},
                          {"peak_allocated_bytes", p.peak_allocated},
                          {"peak_reserved_bytes", p.peak_reserved}});
    if (p.batch == r.max_batch) at_max = p.samples_per_s;
  }
  json probes = json::array();
  for (const auto& p : r.probes) probes.push_back(to_json(p));
  // The breakdowns the report draws: at batch 1 and at the largest batch that fit.
  json breakdowns = json::object();
  for (const auto& p : r.probes)
    if (p.fits && !p.memory.is_null() && (p.batch == 1 || p.batch == r.max_batch))
      breakdowns[p.batch == r.max_batch ? "max_batch" : "batch_1"] = p.memory;
  if (r.max_batch == 1 && breakdowns.contains("max_batch")) breakdowns["batch_1"] = breakdowns["max_batch"];
  const double predicted_peak = r.fit.peak_at(r.max_batch);
  double measured_peak = 0;
  for (const auto& p : r.probes)
    if (p.fits && p.batch == r.max_batch) measured_peak = static_cast<double>(p.peak_reserved);
  return {{"key", key},
          {"model", probe.model},
          {"patch", patch_text(probe.model_context.patch)},
          {"precision", train::to_string(probe.step.precision)},
          {"checkpoint", models::to_string(probe.model_context.checkpoint)},
          {"attention", models::to_string(probe.model_context.attention)},
          {"channels_last", probe.model_context.channels_last},
          {"kernels", kernels::to_string(kernels::kernel_mode())},
          {"lean_decoders", kernels::lean_decoders()},
          {"budget", budget.label()},
          {"budget_report", budget_report},
          {"allocator", memory::cuda_allocator_settings()},
          {"host_allocator", memory::host_allocator_settings()},
          {"dataset", plan.dataset_name},
          {"max_batch", r.max_batch},
          {"first_failing", r.first_failing},
          {"predicted", r.predicted},
          {"probes", search_probes},
          {"seconds", r.seconds + resumed_seconds},  // the resumed probes' time counts
          {"resumed_probes", resumed},
          {"samples_per_s", at_max},
          {"voxels_per_s", at_max * static_cast<double>(voxels(probe.model_context.patch))},
          {"knee_batch", knee_batch(timed)},
          {"fit", {{"static_bytes", r.fit.static_bytes}, {"per_sample_bytes", r.fit.per_sample_bytes}}},
          {"fit_error_at_max", measured_peak > 0 ? (predicted_peak - measured_peak) / measured_peak : 0.0},
          {"leaks", in_process ? in_process->leaks() : 0},
          {"isolated", static_cast<bool>(isolated)},
          {"memory_breakdown", breakdowns},
          {"probe_log", probes},
          {"throughput", throughput}};
}

std::vector<json> read_journal(const fs::path& file) {
  std::vector<json> out;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      out.push_back(json::parse(line));
    } catch (const json::exception&) {
      // A process killed mid-append leaves a partial last line: that point simply runs again.
    }
  }
  return out;
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
// and checkpointing, the plan's channels and classes, and each network's own optimiser.
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
  p.step.precision = precision;
  p.step.optimizer = train::OptimizerOptions::defaults_for(train::default_optimizer(model));
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
  const auto split = data::split_cases(plan.case_ids(), 0.2, o.probe.seed + 12345);
  return data::CacheIndex::load(plan, split.train);
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

void run_sweep(const SweepOptions& o, const std::function<void(const json&)>& on_point) {
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
  for (std::size_t i = o.shard; i < points.size(); i += o.shards) {
    const GridPoint& g = points[i];
    const std::string key = g.key();
    if (done.count(key)) continue;
    const ProbeOptions p = point_probe(o, plan, g.model, g.patch, g.precision, g.checkpoint);
    json entry;
    try {
      entry = search_point(plan, index, p, g.budget, o.max_batch, o.throughput_table,
                           o.isolate ? o.isolate(key) : IsolatedProbe{}, probe_journal);
    } catch (const UnsupportedError& e) {
      entry = {{"key", key}, {"model", g.model}, {"patch", patch_text(g.patch)},
               {"precision", train::to_string(g.precision)}, {"checkpoint", models::to_string(g.checkpoint)},
               {"budget", g.budget.label()}, {"skipped", e.what()}};
    }
    append_line_durable(journal, entry.dump());
    forget_probes(probe_journal, key);  // the point is in the journal now
    // Reports after every point: a sweep stopped midway still leaves a current summary.
    write_reports(read_journal(journal), o.output_dir);
    if (on_point) on_point(entry);
  }
  write_reports(read_journal(journal), o.output_dir);
}

std::size_t grid_size(const SweepGrid& g) { return grid_points(g).size(); }

std::vector<json> merge_journals(const std::vector<fs::path>& journals, const fs::path& dir) {
  std::vector<json> merged;
  std::map<std::string, std::size_t> at;
  for (const auto& file : journals)
    for (auto& e : read_journal(file)) {
      const std::string key = e.value("key", "");
      const auto it = at.find(key);
      if (it == at.end()) {
        at[key] = merged.size();
        merged.push_back(std::move(e));
      } else if (merged[it->second].contains("skipped") && !e.contains("skipped")) {
        merged[it->second] = std::move(e);
      }
    }
  if (merged.empty()) throw ConfigError(dir.string() + ": no sweep results to merge");
  fs::create_directories(dir);
  std::string text;
  for (const auto& e : merged) text += e.dump() + "\n";
  write_file_atomic(dir / "results.jsonl", text);
  write_reports(merged, dir);
  return merged;
}

namespace {

// Plots of peak memory and throughput against the batch; returns summary.md's lines for them. A
// sweep of one model and patch gets memory.png and throughput.png; a sweep of several gets a pair
// per model and patch (memory-unetr-96x96x96.png, ...): a 72-point grid on one chart is unreadable.
std::string write_plots(const std::vector<const json*>& entries, const fs::path& dir) {
  struct Group {
    std::string label;
    std::vector<const json*> entries;
  };
  std::vector<Group> groups;
  for (const json* entry : entries) {
    const json& e = *entry;
    if (!e.contains("throughput") || e["throughput"].empty()) continue;
    const std::string label = e["model"].get<std::string>() + " " + e["patch"].get<std::string>();
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.label == label; });
    if (it == groups.end()) {
      groups.push_back({label, {}});
      it = std::prev(groups.end());
    }
    it->entries.push_back(&e);
  }
  if (groups.empty()) return "";
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) return "\n(no plots: gnuplot is not installed)\n";
  const bool split = groups.size() > 1;

  // One data block per entry, in group order; each chart plots its group's index range.
  std::ostringstream mem, thr;
  std::string titles;
  for (const auto& g : groups)
    for (const json* e : g.entries) {
      const std::string title = (*e)["precision"].get<std::string>() + " " + (*e)["checkpoint"].get<std::string>() +
                                " @" + (*e)["budget"].get<std::string>();
      titles += (titles.empty() ? "" : "|") + (split ? title : g.label + " " + title);
      for (const auto& t : (*e)["throughput"]) {
        mem << t["batch"] << " " << to_gib(t["peak_reserved_bytes"].get<std::uint64_t>()) << "\n";
        thr << t["batch"] << " " << t["samples_per_s"] << "\n";
      }
      mem << "\n\n";
      thr << "\n\n";
    }
  write_file_atomic(dir / "memory.dat", mem.str());
  write_file_atomic(dir / "throughput.dat", thr.str());

  std::ostringstream budget_lines;
  std::set<std::string> budgets;
  for (const json* e : entries)
    if (e->contains("budget_report") && budgets.insert((*e)["budget"].get<std::string>()).second)
      budget_lines << to_gib((*e)["budget_report"].value("usable_bytes", 0ull)) << " lc rgb 'black' dt "
                   << budgets.size() + 1 << " lw 2 title '" << (*e)["budget"].get<std::string>() << " usable', ";

  std::ostringstream gp, md;
  gp << "set terminal pngcairo size 1100,700 noenhanced\nset key outside right\nset grid\nset xlabel 'batch'\n"
     << "titles = '" << titles << "'\n"
     << "t(i) = system(sprintf(\"echo '%s' | cut -d'|' -f%d\", titles, i + 1))\n";
  std::vector<fs::path> outputs;
  std::size_t first = 0;
  for (const auto& g : groups) {
    const std::size_t last = first + g.entries.size() - 1;
    // 8 colours and 13 point types: no two of a chart's first 104 series look alike.
    const std::string range = "for [i=" + std::to_string(first) + ":" + std::to_string(last) + "] '";
    const std::string style = "' index i with linespoints lc ((i - " + std::to_string(first) + ") % 8) + 1 pt ((i - " +
                              std::to_string(first) + ") % 13) + 1 title t(i)\n";
    const std::string of = split ? ": " + g.label : "";
    std::string stem = split ? "-" + g.label : "";  // "-unetr-96x96x96"
    std::replace(stem.begin(), stem.end(), ' ', '-');
    const fs::path memory_png = dir / ("memory" + stem + ".png"), throughput_png = dir / ("throughput" + stem + ".png");
    gp << "set output '" << memory_png.string() << ".tmp'\nset ylabel 'peak reserved (GiB)'\n"
       << "set title 'Peak memory against batch" << of << " (horizontal: usable memory of each budget)'\nplot "
       << budget_lines.str() << range << (dir / "memory.dat").string() << style;
    gp << "set output '" << throughput_png.string() << ".tmp'\nset ylabel 'samples/s'\n"
       << "set title 'Training throughput against batch" << of << "'\nplot " << range
       << (dir / "throughput.dat").string() << style;
    outputs.push_back(memory_png);
    outputs.push_back(throughput_png);
    if (split) md << "\n" << g.label << ":\n";
    md << "\n![peak memory" << of << "](" << memory_png.filename().string() << ")\n\n![throughput" << of << "]("
       << throughput_png.filename().string() << ")\n";
    first = last + 1;
  }
  write_file_atomic(dir / "plots.gp", gp.str());
  const std::string cmd = "gnuplot '" + (dir / "plots.gp").string() + "' >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return "\n(no plots: gnuplot failed on plots.gp)\n";
  for (const auto& png : outputs) rename_durable(png.string() + ".tmp", png);
  if (split)  // the one-chart pair of an earlier, smaller journal in the same folder
    for (const char* stale : {"memory.png", "throughput.png"}) fs::remove(dir / stale);
  return md.str();
}

// The values of `field` in the order the entries first show them.
std::vector<std::string> first_seen(const std::vector<json>& entries, const char* field) {
  std::vector<std::string> values;
  for (const auto& e : entries)
    if (std::find(values.begin(), values.end(), e.value(field, "")) == values.end()) values.push_back(e.value(field, ""));
  return values;
}

// The entries in grid order, whatever order the journal's points ran in: models as first seen,
// patches by size, precisions and checkpointing as the options list them (fp32 first, `none`
// first), budgets as first journalled. The CSV, the table and the charts all follow it.
std::vector<const json*> grid_order(const std::vector<json>& entries) {
  std::map<std::string, std::size_t> model_rank, budget_rank;
  for (const auto& m : first_seen(entries, "model")) model_rank.emplace(m, model_rank.size());
  for (const auto& b : first_seen(entries, "budget")) budget_rank.emplace(b, budget_rank.size());
  const auto sort_key = [&](const json* e) {
    const std::int64_t patch_voxels = voxels(patch_from_text(e->value("patch", "")));
    int precision = 99;
    try {
      precision = static_cast<int>(train::parse_precision(e->value("precision", "")));
    } catch (const std::exception&) {
    }
    const bool checkpointed = e->value("checkpoint", "") != "none";
    return std::make_tuple(model_rank[e->value("model", "")], patch_voxels, precision, checkpointed,
                           budget_rank[e->value("budget", "")]);
  };
  std::vector<const json*> ordered;
  for (const auto& e : entries) ordered.push_back(&e);
  std::stable_sort(ordered.begin(), ordered.end(),
                   [&](const json* a, const json* b) { return sort_key(a) < sort_key(b); });
  return ordered;
}

}  // namespace

void write_reports(const std::vector<json>& entries, const fs::path& dir) {
  const std::vector<const json*> ordered = grid_order(entries);
  // results.csv: one row per configuration
  std::ostringstream csv;
  csv << "model,patch,precision,checkpoint,budget,usable_bytes,max_batch,first_failing,predicted,probes,seconds,"
         "samples_per_s,voxels_per_s,knee_batch,static_bytes,per_sample_bytes\n";
  const std::vector<std::string> budgets = first_seen(entries, "budget");
  std::map<std::string, std::map<std::string, const json*>> rows;  // config -> budget -> entry
  std::vector<std::string> row_order;
  for (const json* entry : ordered) {
    const json& e = *entry;
    const std::string budget = e.value("budget", "");
    const std::string row = e.value("model", "") + " | " + e.value("patch", "") + " | " + e.value("precision", "") +
                            " | " + e.value("checkpoint", "");
    if (!rows.count(row)) row_order.push_back(row);
    rows[row][budget] = &e;
    if (e.contains("skipped")) continue;
    csv << e["model"].get<std::string>() << "," << e["patch"].get<std::string>() << ","
        << e["precision"].get<std::string>() << "," << e["checkpoint"].get<std::string>() << "," << budget << ","
        << e["budget_report"].value("usable_bytes", 0ull) << "," << e["max_batch"] << "," << e["first_failing"] << ","
        << e["predicted"] << "," << e["probes"] << "," << fixed(e["seconds"].get<double>(), 1) << ","
        << fixed(e["samples_per_s"].get<double>(), 2) << "," << fixed(e["voxels_per_s"].get<double>(), 0) << ","
        << e["knee_batch"] << "," << fixed(e["fit"]["static_bytes"].get<double>(), 0) << ","
        << fixed(e["fit"]["per_sample_bytes"].get<double>(), 0) << "\n";
  }
  write_file_atomic(dir / "results.csv", csv.str());

  // summary.md: the budgets side by side
  std::ostringstream md;
  md << "# Largest batch that trains, by budget\n\n"
        "Each cell: the largest batch that trained (b fits, b+1 ran out of memory, both seen by real training "
        "steps), samples/s at that batch, the knee (the smallest measured batch within 95% of the best samples/s, "
        "with its samples/s: near the cap throughput often drops, so this is the batch to train at), and the "
        "search's probes / seconds.\n\n";
  md << "| model | patch | precision | checkpointing |";
  for (const auto& b : budgets)
    md << " " << b << " max batch | " << b << " samples/s | " << b << " knee (samples/s) | " << b << " probes / s |";
  md << "\n|---|---|---|---|";
  for (size_t i = 0; i < budgets.size(); ++i) md << "---:|---:|---:|---:|";
  md << "\n";
  for (const auto& row : row_order) {
    md << "| " << row << " |";
    for (const auto& b : budgets) {
      const auto it = rows[row].find(b);
      if (it == rows[row].end()) {
        md << " | | | |";
      } else if (it->second->contains("skipped")) {
        md << " skipped | | | |";
      } else {
        const json& e = *it->second;
        md << " " << e["max_batch"] << " | " << fixed(e["samples_per_s"].get<double>(), 1) << " | " << e["knee_batch"];
        for (const auto& p : e.value("throughput", json::array()))
          if (p.value("batch", json()) == e["knee_batch"]) {
            md << " (" << fixed(p.value("samples_per_s", 0.0), 1) << ")";
            break;
          }
        md << " | " << e["probes"] << " / " << fixed(e["seconds"].get<double>(), 0) << " |";
      }
    }
    md << "\n";
  }
  for (const auto& e : entries)
    if (e.contains("budget_report")) {
      const json& r = e["budget_report"];
      md << "\nBudgets on " << r.value("device", "?") << ": ";
      // Per label, in the order first seen; a journal written by several voxfit versions or
      // processes may hold different measured contexts for one label: their range is given.
      std::vector<std::string> labels;
      std::map<std::string, std::vector<const json*>> by_label;
      for (const auto& f : entries)
        if (f.contains("budget_report")) {
          auto& list = by_label[f["budget"].get<std::string>()];
          if (list.empty()) labels.push_back(f["budget"].get<std::string>());
          list.push_back(&f["budget_report"]);
        }
      const auto range = [](const std::vector<const json*>& reports, const char* field) {
        std::uint64_t lo = std::numeric_limits<std::uint64_t>::max(), hi = 0;
        for (const json* b : reports) {
          const auto v = b->value(field, std::uint64_t{0});
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
        return lo == hi ? format_bytes(lo) : format_bytes(lo) + " to " + format_bytes(hi);
      };
      for (const auto& label : labels) {
        const auto& reports = by_label[label];
        md << label << " = " << range(reports, "usable_bytes") << " usable";
        if (reports.front()->value("device", "").rfind("cuda", 0) == 0)
          md << " (CUDA-visible " << range(reports, "visible_bytes") << " - measured context "
             << range(reports, "overhead_bytes") << ")";
        else
          md << " (voxfit's capped CPU allocator)";
        md << "; ";
      }
      md << "\n";
      break;
    }

  md << write_plots(ordered, dir);
  md << memory_report(ordered, dir);
  write_file_atomic(dir / "summary.md", md.str());
}

}  // namespace voxfit::sweep
