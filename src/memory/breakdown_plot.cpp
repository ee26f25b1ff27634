#include "voxfit/memory/breakdown_plot.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <sstream>

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/gnuplot.h"
#include "voxfit/memory/memory_breakdown.h"

namespace voxfit::memory {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Draws `png` with `script` (written beside it as PNG.gp); "" or why not.
std::string run_gnuplot(const fs::path& png, const std::string& script) {
  GnuplotScript gp;
  const std::string output = gp.output(png);
  return gp.run(png.string() + ".gp", output + script);
}

}  // namespace

std::string write_breakdown_bars(const std::vector<std::pair<std::string, json>>& bars, const fs::path& png,
                                 const std::string& title) {
  // Columns: the union of the bars' segments, in first-seen order (networks differ in blocks).
  std::vector<std::string> columns;
  std::vector<std::map<std::string, double>> rows;
  for (const auto& [label, breakdown] : bars) {
    std::map<std::string, double> row;
    for (const auto& [name, bytes] : bar_segments(breakdown)) {
      if (std::find(columns.begin(), columns.end(), name) == columns.end()) columns.push_back(name);
      row[name] += bytes / kGiB;
    }
    rows.push_back(std::move(row));
  }
  // What is not a block stacks on top in a fixed order, headroom last, also where one bar's peak
  // came before a block that another bar has (a forward peak at batch 1, say).
  const std::vector<std::string> top = {"other activations", "workspace", "fragmentation", "headroom"};
  std::stable_partition(columns.begin(), columns.end(),
                        [&](const std::string& c) { return std::find(top.begin(), top.end(), c) == top.end(); });
  std::sort(std::find_first_of(columns.begin(), columns.end(), top.begin(), top.end()), columns.end(),
            [&](const std::string& a, const std::string& b) {
              return std::find(top.begin(), top.end(), a) < std::find(top.begin(), top.end(), b);
            });
  std::ostringstream dat;
  dat << "bar";
  for (const auto& c : columns) dat << "\t\"" << c << "\"";
  dat << "\n";
  for (std::size_t i = 0; i < bars.size(); ++i) {
    dat << "\"" << bars[i].first << "\"";
    for (const auto& c : columns) dat << "\t" << (rows[i].count(c) ? rows[i].at(c) : 0.0);
    dat << "\n";
  }
  const fs::path data = png.string() + ".dat";
  write_file_atomic(data, dat.str());
  std::ostringstream gp;
  gp << "set title " << gnuplot_quoted(title) << "\nset ylabel 'GiB'\nset key outside right\nset grid ytics\n"
     << "set style data histograms\nset style histogram rowstacked\nset style fill solid 0.85 border -1\n"
     // gnuplot's default line types repeat after eight: a 20-colour palette keeps neighbours apart.
     << "colors = '#1f77b4 #ff7f0e #2ca02c #d62728 #9467bd #8c564b #e377c2 #7f7f7f #bcbd22 #17becf "
     << "#aec7e8 #ffbb78 #98df8a #ff9896 #c5b0d5 #c49c94 #f7b6d2 #c7c7c7 #dbdb8d #9edae5'\n"
     << "set boxwidth 0.6\nplot for [c=2:" << columns.size() + 1 << "] '" << data.string()
     << "' using c:xtic(1) title columnheader(c) lc rgb word(colors, (c - 2) % 20 + 1)\n";
  return run_gnuplot(png, gp.str());
}

std::string write_components_by_batch(const std::vector<json>& breakdowns, const fs::path& png,
                                      const std::string& title) {
  std::vector<const json*> sorted;
  for (const auto& b : breakdowns) sorted.push_back(&b);
  std::sort(sorted.begin(), sorted.end(),
            [](const json* a, const json* b) { return a->value("batch", 0) < b->value("batch", 0); });
  const std::vector<std::string> groups{"static", "inputs", "activations", "workspace"};
  std::ostringstream dat;
  for (const json* b : sorted) {
    dat << b->value("batch", 0);
    for (const auto& g : groups) {
      double bytes = 0;
      for (const auto& p : b->at("parts"))
        if (p.at("group") == g) bytes += p.at("bytes").get<double>();
      dat << " " << bytes / kGiB;
    }
    dat << " " << b->value("fragmentation", 0.0) / kGiB << "\n";
  }
  const fs::path data = png.string() + ".dat";
  write_file_atomic(data, dat.str());
  std::ostringstream gp;
  gp << "set title " << gnuplot_quoted(title)
     << "\nset xlabel 'batch'\nset ylabel 'GiB at the peak'\nset key outside right\n"
     << "set grid\nplot '" << data.string() << "' using 1:2 with linespoints title 'static', '' using 1:3 with "
     << "linespoints title 'batch', '' using 1:4 with linespoints title 'activations', '' using 1:5 with "
     << "linespoints title 'workspace', '' using 1:6 with linespoints title 'fragmentation'\n";
  return run_gnuplot(png, gp.str());
}

}  // namespace voxfit::memory
