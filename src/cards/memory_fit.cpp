#include "voxfit/cards/memory_fit.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/csv.h"
#include "voxfit/core/error.h"
#include "voxfit/sweep/batch_search.h"

namespace voxfit::cards {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

template <typename T>
T need(const json& j, const char* key, const char* sub, const std::string& where) {
  const std::string name = sub ? std::string(key) + "." + sub : std::string(key);
  const json* v = &j;
  for (const char* k : {key, sub}) {
    if (!k) break;
    if (!v->is_object() || !v->contains(k)) throw IoError(where + ": missing field '" + name + "'");
    v = &v->at(k);
  }
  try {
    return v->get<T>();
  } catch (const json::exception&) {
    throw IoError(where + ": field '" + name + "' has the wrong type (" + v->type_name() + ")");
  }
}

double mib(std::uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

}  // namespace

std::vector<SweptPoint> load_sweep_results(const fs::path& sweep_dir) {
  const fs::path file = sweep_dir / "results.jsonl";
  std::ifstream in(file);
  if (!in) throw IoError(file.string() + ": cannot read the sweep results (missing or unreadable)");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::vector<SweptPoint> out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    const std::string where = file.string() + ":" + std::to_string(i + 1);
    json e;
    try {
      e = json::parse(lines[i]);
    } catch (const json::exception&) {
      if (i + 1 == lines.size()) continue;  // a crash mid-append; the sweep reruns that point
      throw IoError(where + ": not a JSON object (a sweep journal has one per line)");
    }
    if (!e.is_object()) throw IoError(where + ": not a JSON object (a sweep journal has one per line)");
    if (e.contains("skipped")) continue;
    SweptPoint p;
    p.model = need<std::string>(e, "model", nullptr, where);
    p.patch = need<std::string>(e, "patch", nullptr, where);
    p.precision = need<std::string>(e, "precision", nullptr, where);
    p.checkpoint = need<std::string>(e, "checkpoint", nullptr, where);
    p.budget = need<std::string>(e, "budget", nullptr, where);
    p.visible_bytes = need<std::uint64_t>(e, "budget_report", "visible_bytes", where);
    p.overhead_bytes = need<std::uint64_t>(e, "budget_report", "overhead_bytes", where);
    p.static_bytes = need<double>(e, "fit", "static_bytes", where);
    p.per_sample_bytes = need<double>(e, "fit", "per_sample_bytes", where);
    p.max_batch = need<std::int64_t>(e, "max_batch", nullptr, where);
    if (p.visible_bytes == 0)
      throw IoError(where + ": budget_report.visible_bytes is 0 (an uncapped sweep has no card to rescale)");
    if (!(p.per_sample_bytes > 0)) throw IoError(where + ": fit.per_sample_bytes must be > 0");
    if (e.contains("throughput") && e["throughput"].is_array())
      for (const auto& t : e["throughput"])
        if (t.contains("batch") && t.contains("samples_per_s"))
          p.throughput.emplace_back(t["batch"].get<std::int64_t>(), t["samples_per_s"].get<double>());
    std::sort(p.throughput.begin(), p.throughput.end());
    out.push_back(std::move(p));
  }
  if (out.empty()) throw IoError(file.string() + ": no configuration with a memory fit");
  return out;
}

std::uint64_t usable_bytes(std::uint64_t visible, std::uint64_t overhead) {
  return visible > overhead ? visible - overhead : 0;
}

std::int64_t fit_batch(double static_bytes, double per_sample_bytes, std::uint64_t usable) {
  sweep::MemoryFit f;
  f.static_bytes = static_bytes;
  f.per_sample_bytes = per_sample_bytes;
  f.points = 2;
  return f.predict(static_cast<double>(usable));
}

std::vector<CardFit> fit_cards(const std::vector<SweptPoint>& points, const memory::CardTable& table) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<const SweptPoint*>> by_config;
  for (const auto& p : points) {
    if (!by_config.count(p.config())) order.push_back(p.config());
    by_config[p.config()].push_back(&p);
  }
  std::vector<CardFit> out;
  for (const auto& config : order) {
    const auto& swept = by_config[config];
    for (const auto& card : table.cards()) {
      const std::uint64_t visible = card.cuda_visible_bytes();
      const SweptPoint* nearest = swept.front();
      for (const SweptPoint* p : swept)
        if (std::abs(std::log(static_cast<double>(p->visible_bytes) / static_cast<double>(visible))) <
            std::abs(std::log(static_cast<double>(nearest->visible_bytes) / static_cast<double>(visible))))
          nearest = p;
      CardFit f;
      f.config = config;
      f.model = nearest->model;
      f.patch = nearest->patch;
      f.precision = nearest->precision;
      f.checkpoint = nearest->checkpoint;
      f.card = card.id;
      f.visible_bytes = visible;
      f.overhead_bytes = nearest->overhead_bytes;
      f.usable_bytes = usable_bytes(visible, nearest->overhead_bytes);
      f.fit_from = nearest->budget;
      f.static_bytes = nearest->static_bytes;
      f.per_sample_bytes = nearest->per_sample_bytes;
      f.predicted_batch = fit_batch(f.static_bytes, f.per_sample_bytes, f.usable_bytes);
      for (const SweptPoint* p : swept)
        if (p->budget == card.id) f.measured_batch = p->max_batch;
      out.push_back(std::move(f));
    }
  }
  return out;
}

std::string fit_markdown(const std::vector<CardFit>& fits) {
  std::vector<std::string> cards, configs;
  std::map<std::string, std::map<std::string, const CardFit*>> cell;
  for (const auto& f : fits) {
    if (std::find(cards.begin(), cards.end(), f.card) == cards.end()) cards.push_back(f.card);
    if (std::find(configs.begin(), configs.end(), f.config) == configs.end()) configs.push_back(f.config);
    cell[f.config][f.card] = &f;
  }
  std::ostringstream md;
  md << "| model | patch | precision | checkpointing |";
  for (const auto& c : cards) md << " " << c << " |";
  md << "\n|---|---|---|---|";
  for (std::size_t i = 0; i < cards.size(); ++i) md << "---:|";
  md << "\n";
  for (const auto& config : configs) {
    const CardFit& first = *cell[config].begin()->second;
    md << "| " << first.model << " | " << first.patch << " | " << first.precision << " | " << first.checkpoint << " |";
    for (const auto& c : cards) {
      const auto it = cell[config].find(c);
      if (it == cell[config].end()) {
        md << " |";
        continue;
      }
      const CardFit& f = *it->second;
      md << " " << f.predicted_batch << " (predicted)";
      if (f.measured_batch) md << " / " << *f.measured_batch << " measured";
      md << " |";
    }
    md << "\n";
  }
  return md.str();
}

void write_fit_tables(const std::vector<CardFit>& fits, const fs::path& dir) {
  fs::create_directories(dir);
  std::ostringstream csv;
  CsvWriter table(csv,
                  {"model", "patch", "precision", "checkpoint", "card", "visible_mib", "overhead_mib", "usable_mib",
                   "fit_from", "static_bytes", "per_sample_bytes", "predicted_max_batch", "measured_max_batch"});
  for (const auto& f : fits)
    table.row({f.model, f.patch, f.precision, f.checkpoint, f.card, CsvField::fixed(mib(f.visible_bytes), 0),
               CsvField::fixed(mib(f.overhead_bytes), 0), CsvField::fixed(mib(f.usable_bytes), 0), f.fit_from,
               CsvField::fixed(f.static_bytes, 0), CsvField::fixed(f.per_sample_bytes, 0), f.predicted_batch,
               f.measured_batch ? std::to_string(*f.measured_batch) : ""});
  write_file_atomic(dir / "cards_fit.csv", csv.str());
  std::ostringstream md;
  md << "# Largest batch per card (predicted from the sweep's memory fit)\n\n"
        "Each cell: the largest batch whose predicted peak (static + per-sample x batch, fitted by the sweep) fits "
        "the card's CUDA-visible memory minus the CUDA context and workspaces measured in the sweep; where the sweep "
        "ran that card's own budget, its measured largest batch follows.\n\n"
     << fit_markdown(fits);
  write_file_atomic(dir / "cards_fit.md", md.str());
}

}  // namespace voxfit::cards
