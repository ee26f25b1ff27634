#include "voxfit/sweep/report.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/csv.h"
#include "voxfit/core/gnuplot.h"
#include "voxfit/core/units.h"
#include "voxfit/sweep/journal.h"
#include "voxfit/sweep/memory_report.h"
#include "voxfit/train/precision.h"

namespace voxfit::sweep {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string fixed(double v, int digits) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

}  // namespace

namespace {

// Plots of peak memory and throughput against the batch; returns summary.md's lines for them. A
// sweep of one model and patch gets memory.png and throughput.png; a sweep of several gets a pair
// per model and patch (memory-unetr-96x96x96.png, ...): a 72-point grid on one chart is unreadable.
std::string write_plots(const std::vector<const PointResult*>& entries, const fs::path& dir) {
  struct Group {
    std::string label;
    std::vector<const PointResult*> entries;
  };
  std::vector<Group> groups;
  for (const PointResult* entry : entries) {
    const PointResult& e = *entry;
    if (e.throughput.empty()) continue;
    const std::string label = e.model + " " + e.patch;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.label == label; });
    if (it == groups.end()) {
      groups.push_back({label, {}});
      it = std::prev(groups.end());
    }
    it->entries.push_back(&e);
  }
  if (groups.empty()) return "";
  if (!gnuplot_available()) return "\n(no plots: gnuplot is not installed)\n";
  const bool split = groups.size() > 1;

  // One data block per entry, in group order; each chart plots its group's index range.
  std::ostringstream mem, thr;
  std::string titles;
  for (const auto& g : groups)
    for (const PointResult* e : g.entries) {
      const std::string title = e->precision + " " + e->checkpoint + " @" + e->budget;
      titles += (titles.empty() ? "" : "|") + (split ? title : g.label + " " + title);
      for (const auto& t : e->throughput) {
        mem << t.batch << " " << to_gib(t.peak_reserved_bytes) << "\n";
        thr << t.batch << " " << t.samples_per_s << "\n";
      }
      mem << "\n\n";
      thr << "\n\n";
    }
  write_file_atomic(dir / "memory.dat", mem.str());
  write_file_atomic(dir / "throughput.dat", thr.str());

  std::ostringstream budget_lines;
  std::set<std::string> budgets;
  for (const PointResult* e : entries)
    if (!e->budget_report.is_null() && budgets.insert(e->budget).second)
      budget_lines << to_gib(e->usable_bytes()) << " lc rgb 'black' dt " << budgets.size() + 1 << " lw 2 title '"
                   << e->budget << " usable', ";

  GnuplotScript script;
  std::ostringstream gp, md;
  gp << "set key outside right\nset grid\nset xlabel 'batch'\n"
     << "titles = '" << titles << "'\n"
     << "t(i) = system(sprintf(\"echo '%s' | cut -d'|' -f%d\", titles, i + 1))\n";
  std::size_t first = 0;
  for (const auto& g : groups) {
    const std::size_t last = first + g.entries.size() - 1;
    // 8 colours and 13 point types: no two of a chart's first 104 series look alike.
    const std::string range = "for [i=" + std::to_string(first) + ":" + std::to_string(last) + "] '";
    const std::string style = "' index i with linespoints lc ((i - " + std::to_string(first) + ") % 8) + 1 pt ((i - " +
                              std::to_string(first) + ") % 13) + 1 title t(i)\n";
    const std::string of = split ? ": " + g.label : "";
    std::string stem = split ? "-" + g.label : "";  // "-unetr-96x96x96"; a TorchScript file's path too
    for (char& c : stem)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_') c = '-';
    const fs::path memory_png = dir / ("memory" + stem + ".png"), throughput_png = dir / ("throughput" + stem + ".png");
    gp << script.output(memory_png) << "set ylabel 'peak reserved (GiB)'\n"
       << "set title 'Peak memory against batch" << of << " (horizontal: usable memory of each budget)'\nplot "
       << budget_lines.str() << range << (dir / "memory.dat").string() << style;
    gp << script.output(throughput_png) << "set ylabel 'samples/s'\n"
       << "set title 'Training throughput against batch" << of << "'\nplot " << range
       << (dir / "throughput.dat").string() << style;
    if (split) md << "\n" << g.label << ":\n";
    md << "\n![peak memory" << of << "](" << memory_png.filename().string() << ")\n\n![throughput" << of << "]("
       << throughput_png.filename().string() << ")\n";
    first = last + 1;
  }
  if (const std::string why_not = script.run(dir / "plots.gp", gp.str()); !why_not.empty())
    return "\n(no plots: " + why_not + ")\n";
  if (split)  // the one-chart pair of an earlier, smaller journal in the same folder
    for (const char* stale : {"memory.png", "throughput.png"}) fs::remove(dir / stale);
  return md.str();
}

// The values of `field` in the order the entries first show them.
std::vector<std::string> first_seen(const std::vector<PointResult>& entries, std::string PointResult::*field) {
  std::vector<std::string> values;
  for (const auto& e : entries)
    if (std::find(values.begin(), values.end(), e.*field) == values.end()) values.push_back(e.*field);
  return values;
}

// The entries in grid order, whatever order the journal's points ran in: models as first seen,
// patches by size, precisions and checkpointing as the options list them (fp32 first, `none`
// first), budgets as first journalled. The CSV, the table and the charts all follow it.
std::vector<const PointResult*> grid_order(const std::vector<PointResult>& entries) {
  std::map<std::string, std::size_t> model_rank, budget_rank;
  for (const auto& m : first_seen(entries, &PointResult::model)) model_rank.emplace(m, model_rank.size());
  for (const auto& b : first_seen(entries, &PointResult::budget)) budget_rank.emplace(b, budget_rank.size());
  const auto sort_key = [&](const PointResult* e) {
    const std::int64_t voxels = patch_voxels(parse_shape_text(e->patch).value_or(std::vector<std::int64_t>{}));
    int precision = 99;
    try {
      precision = static_cast<int>(train::parse_precision(e->precision));
    } catch (const std::exception&) {
    }
    const bool checkpointed = e->checkpoint != "none";
    return std::make_tuple(model_rank[e->model], voxels, precision, checkpointed, budget_rank[e->budget]);
  };
  std::vector<const PointResult*> ordered;
  for (const auto& e : entries) ordered.push_back(&e);
  std::stable_sort(ordered.begin(), ordered.end(),
                   [&](const PointResult* a, const PointResult* b) { return sort_key(a) < sort_key(b); });
  return ordered;
}

}  // namespace

void write_reports(const std::vector<PointResult>& entries, const fs::path& dir) {
  const std::vector<const PointResult*> ordered = grid_order(entries);
  // results.csv: one row per configuration
  std::ostringstream csv;
  CsvWriter results(csv, {"model", "patch", "precision", "checkpoint", "budget", "usable_bytes", "max_batch",
                          "first_failing", "predicted", "probes", "seconds", "samples_per_s", "voxels_per_s",
                          "knee_batch", "static_bytes", "per_sample_bytes"});
  const std::vector<std::string> budgets = first_seen(entries, &PointResult::budget);
  std::map<std::string, std::map<std::string, const PointResult*>> rows;  // config -> budget -> entry
  std::vector<std::string> row_order;
  for (const PointResult* entry : ordered) {
    const PointResult& e = *entry;
    const std::string row = e.model + " | " + e.patch + " | " + e.precision + " | " + e.checkpoint;
    if (!rows.count(row)) row_order.push_back(row);
    rows[row][e.budget] = &e;
    if (!e.skipped.empty()) continue;
    results.row({e.model, e.patch, e.precision, e.checkpoint, e.budget, e.usable_bytes(), std::to_string(e.max_batch),
                 std::to_string(e.first_failing), std::to_string(e.predicted), std::to_string(e.probes),
                 CsvField::fixed(e.seconds, 1), CsvField::fixed(e.samples_per_s, 2), CsvField::fixed(e.voxels_per_s, 0),
                 std::to_string(e.knee_batch), CsvField::fixed(e.fit.static_bytes, 0),
                 CsvField::fixed(e.fit.per_sample_bytes, 0)});
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
      } else if (!it->second->skipped.empty()) {
        md << " skipped | | | |";
      } else {
        const PointResult& e = *it->second;
        md << " " << e.max_batch << " | " << fixed(e.samples_per_s, 1) << " | " << e.knee_batch;
        if (const auto* knee = e.throughput_at(e.knee_batch)) md << " (" << fixed(knee->samples_per_s, 1) << ")";
        md << " | " << e.probes << " / " << fixed(e.seconds, 0) << " |";
      }
    }
    md << "\n";
  }
  for (const auto& e : entries)
    if (!e.budget_report.is_null()) {
      const json& r = e.budget_report;
      md << "\nBudgets on " << r.value("device", "?") << ": ";
      // Per label, in the order first seen; a journal written by several voxfit versions or
      // processes may hold different measured contexts for one label: their range is given.
      std::vector<std::string> labels;
      std::map<std::string, std::vector<const json*>> by_label;
      for (const auto& f : entries)
        if (!f.budget_report.is_null()) {
          auto& list = by_label[f.budget];
          if (list.empty()) labels.push_back(f.budget);
          list.push_back(&f.budget_report);
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
