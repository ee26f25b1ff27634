#include "voxfit/data/plan.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/error.h"
#include "voxfit/core/units.h"
#include "voxfit/core/runtime.h"

namespace voxfit::data {

namespace {

using json = nlohmann::json;
constexpr int kPlanFormat = 1;

template <typename T, std::size_t N>
std::array<T, N> to_array(const json& j, const std::string& where) {
  if (!j.is_array() || j.size() != N)
    throw ConfigError(where + ": expected a list of " + std::to_string(N) + " numbers");
  std::array<T, N> a{};
  for (std::size_t i = 0; i < N; ++i) a[i] = j[i].get<T>();
  return a;
}

json folds_json(const std::vector<Split>& folds) {
  json out = json::array();
  for (const auto& f : folds) out.push_back({{"train", f.train}, {"val", f.validation}});
  return out;
}

// A hand-rolled Fisher-Yates with mt19937_64 over the sorted, unique ids: std::shuffle's use of
// the engine is implementation-defined, and splits must not change between standard libraries.
std::vector<std::string> shuffled(std::vector<std::string> ids, std::uint64_t seed) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::mt19937_64 rng(seed);
  for (std::size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng() % i]);
  return ids;
}

Normalisation normalisation_from(const std::string& s, const std::string& where) {
  if (s == "ct") return Normalisation::CT;
  if (s == "zscore") return Normalisation::ZScore;
  throw ConfigError(where + ": unknown normalisation '" + s + "' (expected ct or zscore)");
}

}  // namespace

std::string to_string(Normalisation n) { return n == Normalisation::CT ? "ct" : "zscore"; }

std::optional<Normalisation> parse_normalisation(const std::string& text, const std::string& what) {
  if (text == "auto") return std::nullopt;
  if (text == "ct") return Normalisation::CT;
  if (text == "zscore") return Normalisation::ZScore;
  throw ConfigError(what + ": expected auto, ct or zscore, got '" + text + "'");
}

std::vector<std::string> Plan::case_ids() const {
  std::vector<std::string> ids;
  for (const auto& c : cases) ids.push_back(c.id);
  return ids;
}

fs::path Plan::case_file(const std::string& id) const { return cache_dir / "cases" / (id + ".h5"); }

int Plan::class_of(std::int64_t label_value) const {
  const auto it = std::find(label_values.begin(), label_values.end(), label_value);
  return it == label_values.end() ? -1 : static_cast<int>(it - label_values.begin());
}

void save_plan(const Plan& plan) {
  json j;
  j["format"] = kPlanFormat;
  j["voxfit_version"] = voxfit_version();
  j["dataset"] = plan.dataset_name;
  j["fingerprint"] = plan.fingerprint;
  j["channels"] = plan.channel_names;
  json norm = json::array();
  for (const auto& n : plan.normalisation) {
    json c{{"scheme", to_string(n.scheme)}};
    if (n.scheme == Normalisation::CT)
      c.update({{"lower", n.lower}, {"upper", n.upper}, {"mean", n.mean}, {"std", n.std}});
    norm.push_back(c);
  }
  j["normalisation"] = norm;
  j["target_spacing"] = plan.target_spacing;
  j["median_spacing"] = plan.median_spacing;
  j["crop_to_nonzero"] = plan.crop_to_nonzero;
  j["foreground_samples_per_class"] = plan.foreground_samples_per_class;
  json classes = json::array();
  for (std::size_t k = 0; k < plan.label_values.size(); ++k)
    classes.push_back({{"class", k}, {"value", plan.label_values[k]}, {"name", plan.class_names.at(k)}});
  j["classes"] = classes;
  json cases = json::array();
  for (const auto& c : plan.cases)
    cases.push_back({{"id", c.id}, {"shape", c.shape}, {"images", c.source_images}, {"label", c.source_label}});
  j["cases"] = cases;
  if (plan.declared_splits)
    j["declared_splits"] = {{"source", plan.declared_splits->source},
                            {"file", plan.declared_splits->file},
                            {"folds", folds_json(plan.declared_splits->folds)}};
  write_file_atomic(plan.cache_dir / "plan.json", j.dump(2) + "\n");
}

Plan load_plan(const fs::path& cache_dir) {
  const fs::path file = cache_dir / "plan.json";
  std::ifstream in(file);
  if (!in) throw IoError(file.string() + ": cannot open (expected a cache made by 'voxfit data prepare')");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw IoError(file.string() + ": not valid JSON (" + e.what() + ")");
  }
  Plan p;
  p.cache_dir = cache_dir;
  std::string field;
  try {
    field = "format";
    if (j.at("format").get<int>() != kPlanFormat)
      throw IoError(file.string() + ": plan format " + j["format"].dump() + ", expected " +
                    std::to_string(kPlanFormat) + " (prepare the cache again)");
    field = "dataset";
    p.dataset_name = j.at("dataset").get<std::string>();
    field = "fingerprint";
    p.fingerprint = j.at("fingerprint").get<std::string>();
    field = "channels";
    p.channel_names = j.at("channels").get<std::vector<std::string>>();
    field = "normalisation";
    for (const auto& n : j.at("normalisation")) {
      ChannelNormalisation c;
      c.scheme = normalisation_from(n.at("scheme").get<std::string>(), file.string() + ": normalisation");
      if (c.scheme == Normalisation::CT) {
        c.lower = n.at("lower").get<double>();
        c.upper = n.at("upper").get<double>();
        c.mean = n.at("mean").get<double>();
        c.std = n.at("std").get<double>();
      }
      p.normalisation.push_back(c);
    }
    field = "target_spacing";
    p.target_spacing = to_array<double, 3>(j.at("target_spacing"), file.string() + ": target_spacing");
    field = "median_spacing";
    p.median_spacing = to_array<double, 3>(j.at("median_spacing"), file.string() + ": median_spacing");
    field = "crop_to_nonzero";
    p.crop_to_nonzero = j.at("crop_to_nonzero").get<bool>();
    field = "foreground_samples_per_class";
    p.foreground_samples_per_class = j.at("foreground_samples_per_class").get<std::int64_t>();
    field = "classes";
    for (const auto& c : j.at("classes")) {
      p.label_values.push_back(c.at("value").get<std::int64_t>());
      p.class_names.push_back(c.at("name").get<std::string>());
    }
    field = "cases";
    for (const auto& c : j.at("cases")) {
      PlanCase pc;
      pc.id = c.at("id").get<std::string>();
      pc.shape = to_array<std::int64_t, 3>(c.at("shape"), file.string() + ": cases[].shape");
      pc.source_images = c.at("images").get<std::vector<std::string>>();
      pc.source_label = c.at("label").get<std::string>();
      p.cases.push_back(std::move(pc));
    }
    field = "declared_splits";
    if (j.contains("declared_splits")) {
      const json& d = j["declared_splits"];
      DeclaredSplits declared{d.at("source").get<std::string>(), d.at("file").get<std::string>(), {}};
      for (const auto& f : d.at("folds"))
        declared.folds.push_back(
            {f.at("train").get<std::vector<std::string>>(), f.at("val").get<std::vector<std::string>>()});
      p.declared_splits = std::move(declared);
    }
  } catch (const json::exception& e) {
    throw IoError(file.string() + ": field '" + field + "': " + e.what());
  }
  if (p.normalisation.size() != p.channel_names.size())
    throw IoError(file.string() + ": 'normalisation' has " + std::to_string(p.normalisation.size()) +
                  " entries for " + std::to_string(p.channel_names.size()) + " channels");
  if (p.label_values.empty() || p.label_values[0] != 0)
    throw IoError(file.string() + ": 'classes' must start with background (value 0)");
  return p;
}

Split split_cases(std::vector<std::string> ids, double validation_fraction, std::uint64_t seed) {
  if (validation_fraction < 0.0 || validation_fraction >= 1.0)
    throw ConfigError("validation fraction " + std::to_string(validation_fraction) + ": expected 0 <= f < 1");
  ids = shuffled(std::move(ids), seed);
  const std::size_t n = ids.size();
  std::size_t n_val = static_cast<std::size_t>(std::llround(validation_fraction * static_cast<double>(n)));
  if (validation_fraction > 0.0 && n >= 2) n_val = std::clamp<std::size_t>(n_val, 1, n - 1);
  Split s;
  s.validation.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n_val));
  s.train.assign(ids.begin() + static_cast<std::ptrdiff_t>(n_val), ids.end());
  std::sort(s.validation.begin(), s.validation.end());
  std::sort(s.train.begin(), s.train.end());
  return s;
}

std::vector<Split> five_folds(std::vector<std::string> ids, std::uint64_t seed) {
  ids = shuffled(std::move(ids), seed);
  std::vector<Split> folds(kFolds);
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::size_t k = 0; k < folds.size(); ++k)
      (i % kFolds == k ? folds[k].validation : folds[k].train).push_back(ids[i]);
  for (auto& f : folds) {
    std::sort(f.train.begin(), f.train.end());
    std::sort(f.validation.begin(), f.validation.end());
  }
  return folds;
}

RunSplit run_split(const Plan& plan, double validation_fraction, std::uint64_t seed, std::optional<int> fold) {
  if (fold && (*fold < 0 || *fold >= kFolds))
    throw ConfigError("--fold " + std::to_string(*fold) + ": expected 0 to " + std::to_string(kFolds - 1));
  RunSplit r;
  if (plan.declared_splits) {
    const DeclaredSplits& d = *plan.declared_splits;
    const int k = fold.value_or(0);
    if (k >= static_cast<int>(d.folds.size()))
      throw ConfigError("--fold " + std::to_string(k) + ": " + d.file + " declares " + std::to_string(d.folds.size()) +
                        " fold(s) (" + d.source + ")");
    r.source = d.source;
    r.file = d.file;
    r.folds = d.folds;
    r.fold = k;
  } else if (fold) {
    const auto ids = plan.case_ids();
    if (ids.size() < static_cast<std::size_t>(kFolds))
      throw ConfigError("--fold " + std::to_string(*fold) + ": " + plan.cache_dir.string() + " holds " +
                        std::to_string(ids.size()) + " case(s), fewer than the " + std::to_string(kFolds) +
                        " folds need (use --validation-fraction)");
    r.source = "5-fold";
    r.folds = five_folds(ids, seed + 12345);
    r.fold = fold;
  } else {
    r.source = "random";
    r.folds = {split_cases(plan.case_ids(), validation_fraction, seed + 12345)};
  }
  static_cast<Split&>(r) = r.folds[static_cast<std::size_t>(r.fold.value_or(0))];
  return r;
}

void write_splits_json(const fs::path& file, const std::vector<Split>& folds) {
  write_file_atomic(file, folds_json(folds).dump(2) + "\n");
}

void check_patch_fits(const Plan& plan, const std::vector<std::int64_t>& patch) {
  if (patch.size() != 3 || plan.cases.empty()) return;
  static const char* kAxes[] = {"depth", "height", "width"};
  for (int a = 0; a < 3; ++a) {
    std::int64_t largest = 0;
    for (const auto& c : plan.cases) largest = std::max(largest, c.shape[a]);
    if (patch[a] > 2 * largest)
      throw ConfigError("--patch " + shape_text(patch) + ": more than twice every case of " + plan.cache_dir.string() +
                        " in " + kAxes[a] + " (largest " + std::to_string(largest) +
                        " voxels after preprocessing): patches would be mostly padding");
  }
}

}  // namespace voxfit::data
