#include "voxfit/cards/prediction_report.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/csv.h"
#include "voxfit/core/gnuplot.h"
#include "voxfit/core/units.h"

namespace voxfit::cards {

namespace fs = std::filesystem;

namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// A Markdown table with a row per card and a column per profile, each cell `cell` of that card's
// prediction for that profile.
void card_table(std::ostream& md, const std::vector<ProfilePredictions>& predictions, const char* align,
                const std::function<std::string(const CardPrediction&)>& cell) {
  md << "| card |";
  for (const auto& p : predictions) md << " " << p.profile.label() << " |";
  md << "\n|---|";
  for (std::size_t i = 0; i < predictions.size(); ++i) md << align << "|";
  md << "\n";
  if (predictions.empty()) return;
  for (std::size_t c = 0; c < predictions.front().cards.size(); ++c) {
    md << "| " << predictions.front().cards[c].card << " |";
    for (const auto& p : predictions) md << " " << cell(p.cards[c]) << " |";
    md << "\n";
  }
}

// The patch of a [N, C, D, H, W] input shape, as sweeps write it.
std::string patch_text(const std::vector<std::int64_t>& input_shape) {
  return shape_text(
      std::vector<std::int64_t>(input_shape.begin() + std::min<std::size_t>(2, input_shape.size()), input_shape.end()));
}

const CardPrediction* find_card(const ProfilePredictions& p, const std::string& card) {
  for (const auto& c : p.cards)
    if (c.card == card) return &c;
  return nullptr;
}

// Samples/s measured at `batch` (linear between timed batches). Beyond them the best measured
// value: throughput saturates with the batch, and the last point of a sweep can be one slowed by
// the caching allocator thrashing at that budget's cap (SwinUNETR at 48 GiB, batch 18: 2.6
// samples/s against 32.8 at batch 16), which says nothing about a card with more memory.
double interpolate(const std::vector<std::pair<std::int64_t, double>>& curve, std::int64_t batch) {
  if (curve.empty() || batch < 1) return 0;
  if (batch <= curve.front().first) return curve.front().second;
  for (std::size_t i = 1; i < curve.size(); ++i)
    if (batch <= curve[i].first) {
      const auto [b0, s0] = curve[i - 1];
      const auto [b1, s1] = curve[i];
      return s0 + (s1 - s0) * static_cast<double>(batch - b0) / static_cast<double>(b1 - b0);
    }
  double best = 0;
  for (const auto& point : curve) best = std::max(best, point.second);
  return best;
}

}  // namespace

std::vector<ProfilePredictions> predict_all(const std::vector<KernelProfile>& profiles, const memory::CardTable& table,
                                            const RooflineConstants& k) {
  std::vector<ProfilePredictions> out;
  for (const auto& profile : profiles) {
    ProfilePredictions p;
    p.profile = profile;
    const memory::CardSpec& source = source_card(profile, table);
    p.source_card = source.id;
    for (const auto& card : table.cards()) p.cards.push_back(predict_card(profile, source, card, k));
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<ReferenceCheck> check_reference(const std::vector<ProfilePredictions>& predictions,
                                            const std::vector<bench::ReferenceRow>& reference) {
  std::vector<ReferenceCheck> out;
  for (const auto& p : predictions) {
    if (p.profile.train) continue;
    for (const auto& row : reference) {
      if (row.model != p.profile.model || row.precision != p.profile.precision) continue;
      const CardPrediction* c = find_card(p, row.card);
      if (!c) continue;
      out.push_back({row, c->samples_per_s, c->samples_per_s / row.images_per_s - 1.0});
    }
  }
  return out;
}

std::vector<FitThroughput> fit_throughput(const std::vector<CardFit>& fits, const std::vector<SweptPoint>& points,
                                          const std::vector<ProfilePredictions>& predictions) {
  std::map<std::string, std::vector<std::pair<std::int64_t, double>>> curves;  // config -> measured curve
  for (const auto& pt : points) {
    auto& c = curves[pt.config()];
    for (const auto& t : pt.throughput)
      if (std::none_of(c.begin(), c.end(), [&](const auto& x) { return x.first == t.first; })) c.push_back(t);
  }
  for (auto& [config, c] : curves) std::sort(c.begin(), c.end());
  std::vector<FitThroughput> out;
  for (const auto& f : fits) {
    FitThroughput ft{f, 0.0};
    for (const auto& p : predictions) {
      const auto& pr = p.profile;
      if (!pr.train || pr.model != f.model || pr.precision != f.precision || patch_text(pr.input_shape) != f.patch)
        continue;
      const CardPrediction* here = find_card(p, p.source_card);
      const CardPrediction* there = find_card(p, f.card);
      if (!here || !there || here->samples_per_s <= 0) continue;
      ft.samples_per_s = interpolate(curves[f.config], f.predicted_batch) * there->samples_per_s / here->samples_per_s;
      break;
    }
    out.push_back(ft);
  }
  return out;
}

std::string write_prediction_report(const std::vector<ProfilePredictions>& predictions,
                                    const std::vector<ReferenceCheck>& checks,
                                    const std::vector<FitThroughput>& fit_throughputs, const RooflineConstants& k,
                                    const fs::path& dir, bool plot) {
  fs::create_directories(dir);
  std::ostringstream csv;
  CsvWriter table(csv, {"profile", "model", "precision", "train", "batch", "source_card", "card",
                        "predicted_samples_per_s", "kernel_ms", "overhead_ms", "step_ms", "compute_share",
                        "memory_share", "latency_share", "main_unit", "main_unit_tflops"});
  for (const auto& p : predictions)
    for (const auto& c : p.cards)
      table.row({CsvField::quoted(p.profile.label()), p.profile.model, p.profile.precision,
                 p.profile.train ? "true" : "false", p.profile.batch, p.source_card, c.card,
                 CsvField::fixed(c.samples_per_s, 1), CsvField::fixed(c.kernel_s * 1e3, 3),
                 CsvField::fixed(c.overhead_s * 1e3, 3), CsvField::fixed(c.step_s * 1e3, 3),
                 CsvField::fixed(c.compute_share(), 3), CsvField::fixed(c.memory_share(), 3),
                 CsvField::fixed(c.latency_share(), 3), to_string(c.main_unit),
                 CsvField::fixed(c.main_unit_flops * 1e-12, 1)});
  write_file_atomic(dir / "predictions.csv", csv.str());

  std::ostringstream md;
  md << "# Predicted throughput per card\n\nSamples (images) per second. Each profile kernel's time is its roofline "
        "time on the card, at the rate of the unit its arithmetic runs on there (tensor cores for its type where the "
        "card has them, else FP32 arithmetic on the data as stored (pseudo-half); power-limited to TDP / energy per "
        "FLOP, not below the base "
        "clock's share, where an energy constant exists for the card's architecture and unit) and the card's bandwidth "
        "(x 15/16 with in-band ECC), with memory efficiency "
     << fixed(k.memory_efficiency, 2) << " and compute efficiency " << fixed(k.compute_efficiency, 2)
     << " for every card, plus the part the profiled card's roofline does not explain, scaled by SM count x boost "
        "clock; a kernel faster than the profiled card's roofline takes the card's roofline where one launch's bytes "
        "exceed the card's smaller L2; kernel latency "
     << fixed(k.kernel_latency_us, 1) << " us kept; launch and host time kept from the profile. Constants:";
  for (const auto& [name, value] : free_parameters(k)) md << " " << name << " = " << fixed(value, 3) << ";";
  md << "\n\n";
  card_table(md, predictions, "---:", [](const CardPrediction& x) { return fixed(x.samples_per_s, 1); });
  md << "\n## Where the time goes\n\nPer card and profile: the share of the predicted step that is compute-bound "
        "(kernels above the card's ridge point, at the sustained rate), memory-bound (below it, and copies) and "
        "latency-bound (time beyond the profiled GPU's roofline, scaled by SMs x clock, and the launch and host time "
        "kept), as compute / memory / latency %; then the unit the profile's main arithmetic runs on and its sustained "
        "TFLOP/s (* where power-limited below the datasheet peak).\n\n";
  card_table(md, predictions, "---", [](const CardPrediction& x) {
    return fixed(100 * x.compute_share(), 0) + " / " + fixed(100 * x.memory_share(), 0) + " / " +
           fixed(100 * x.latency_share(), 0) + " % " + to_string(x.main_unit) + " " +
           fixed(x.main_unit_flops * 1e-12, x.main_unit_flops < 1e12 ? 2 : 1) + (x.power_limited ? "*" : "");
  });
  md << "\nProfiles:";
  for (const auto& p : predictions)
    md << " " << p.profile.label() << " on " << p.profile.device_name << " (" << p.source_card << "): measured "
       << fixed(p.profile.samples_per_s(), 1) << " samples/s, kernels " << fixed(p.profile.kernel_s_per_step() * 1e3, 3)
       << " ms + other " << fixed(p.profile.overhead_s_per_step() * 1e3, 3) << " ms a step;";
  md << "\n";
  if (!checks.empty()) {
    md << "\n## Against the published numbers\n\n| card | model | precision | published img/s | predicted img/s | "
          "error |\n"
          "|---|---|---|---:|---:|---:|\n";
    for (const auto& c : checks)
      md << "| " << c.reference.card << " | " << c.reference.model << " | " << c.reference.precision << " | "
         << fixed(c.reference.images_per_s, 0) << " | " << fixed(c.predicted, 0) << " | " << (c.error >= 0 ? "+" : "")
         << fixed(100.0 * c.error, 1) << "% |\n";
  }
  if (!fit_throughputs.empty()) {
    md << "\n## Largest batch and samples/s per card\n\nThe sweep's memory fit gives the batch; samples/s there is the "
          "sweep's measured curve on the profiled GPU times the card's predicted speed from the matching training "
          "profile (blank: no profile).\n\n| model | patch | precision | checkpointing | card | batch | samples/s |\n"
          "|---|---|---|---|---|---:|---:|\n";
    for (const auto& f : fit_throughputs)
      md << "| " << f.fit.model << " | " << f.fit.patch << " | " << f.fit.precision << " | " << f.fit.checkpoint
         << " | " << f.fit.card << " | " << f.fit.predicted_batch
         << (f.fit.measured_batch ? " (measured " + std::to_string(*f.fit.measured_batch) + ")" : "") << " | "
         << (f.samples_per_s > 0 ? fixed(f.samples_per_s, 1) : "") << " |\n";
    std::ostringstream fcsv;
    CsvWriter fit_table(fcsv, {"model", "patch", "precision", "checkpoint", "card", "predicted_max_batch",
                               "measured_max_batch", "predicted_samples_per_s"});
    for (const auto& f : fit_throughputs)
      fit_table.row({f.fit.model, f.fit.patch, f.fit.precision, f.fit.checkpoint, f.fit.card, f.fit.predicted_batch,
                     f.fit.measured_batch ? std::to_string(*f.fit.measured_batch) : "",
                     f.samples_per_s > 0 ? CsvField::fixed(f.samples_per_s, 2) : CsvField("")});
    write_file_atomic(dir / "fit_throughput.csv", fcsv.str());
  }

  std::string not_plotted = !plot ? "--plot off" : predictions.empty() ? "no predictions" : "";
  if (not_plotted.empty()) {
    std::ostringstream dat;
    dat << "card";
    for (const auto& p : predictions) dat << " \"" << p.profile.label() << "\"";
    dat << "\n";
    for (std::size_t c = 0; c < predictions.front().cards.size(); ++c) {
      dat << predictions.front().cards[c].card;
      for (const auto& p : predictions) dat << " " << fixed(p.cards[c].samples_per_s, 2);
      dat << "\n";
    }
    write_file_atomic(dir / "predictions.dat", dat.str());
    GnuplotScript script(1200, 700);
    std::ostringstream gp;
    gp << script.output(dir / "predictions.png")
       << "set title 'Predicted throughput per card'\nset ylabel 'samples/s'\nset logscale y\nset grid ytics\n"
       << "set style data histograms\nset style histogram cluster gap 1\nset style fill solid 0.8 border -1\n"
       << "set xtics rotate by -45\nset key outside right\n"
       << "plot for [i=2:" << predictions.size() + 1 << "] " << gnuplot_quoted((dir / "predictions.dat").string())
       << " using i:xtic(1) title columnheader(i)\n";
    not_plotted = script.run(dir / "predictions.gp", gp.str());
  }
  md << (not_plotted.empty() ? "\n![predicted throughput](predictions.png)\n" : "\n(no plot: " + not_plotted + ")\n");
  write_file_atomic(dir / "predictions.md", md.str());
  return md.str();
}

}  // namespace voxfit::cards
