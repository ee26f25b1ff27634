#include "voxfit/sweep/plan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/error.h"
#include "voxfit/core/units.h"
#include "voxfit/kernels/conv_of_concat.h"
#include "voxfit/kernels/instance_norm_act.h"
#include "voxfit/models/network.h"
#include "voxfit/sweep/batch_search.h"
#include "voxfit/train/step_memory.h"

namespace voxfit::sweep {

using nlohmann::json;
namespace fs = std::filesystem;
using models::Axes3;
using models::ResEncTopology;
using models::ResEncUNetOptions;

namespace {

// nnU-Net's planners (default_experiment_planner.py, residual_encoder_unet_planners.py).
constexpr double kInitialVoxels = 256.0 * 256.0 * 256.0;  // the 3D start: 256^3 voxels
constexpr std::int64_t kReferenceBatch = 2;               // UNet_reference_val_corresp_bs_3d
constexpr std::int64_t kMinBatch = 2;                     // UNet_min_batch_size

// Python's round(): halves to even (the default rounding mode).
std::int64_t round_half_even(double v) { return static_cast<std::int64_t>(std::nearbyint(v)); }

std::vector<std::int64_t> vec(const Axes3& a) { return {a[0], a[1], a[2]}; }

std::int64_t voxels(const std::vector<std::int64_t>& p) { return p[0] * p[1] * p[2]; }

std::string patch_text(const std::vector<std::int64_t>& p) {
  return std::to_string(p[0]) + "x" + std::to_string(p[1]) + "x" + std::to_string(p[2]);
}

json topology_json(const ResEncTopology& t) {
  json strides = json::array(), kernels = json::array();
  for (size_t s = 0; s < t.stages(); ++s) {
    strides.push_back(vec(t.strides[s]));
    kernels.push_back(vec(t.kernels[s]));
  }
  return {{"stages", t.stages()}, {"strides", strides},    {"kernels", kernels},       {"features", t.features},
          {"blocks", t.blocks},   {"patch", vec(t.patch)}, {"divisor", vec(t.divisor)}};
}

ResEncTopology topology_from(const json& j) {
  ResEncTopology t;
  for (const auto& s : j.at("strides")) t.strides.push_back(s.get<Axes3>());
  for (const auto& k : j.at("kernels")) t.kernels.push_back(k.get<Axes3>());
  t.features = j.at("features").get<std::vector<std::int64_t>>();
  t.blocks = j.at("blocks").get<std::vector<std::int64_t>>();
  t.patch = j.at("patch").get<Axes3>();
  t.divisor = j.at("divisor").get<Axes3>();
  return t;
}

json candidate_json(const PlanCandidate& c) {
  return {{"patch", c.patch},
          {"predicted_peak", c.predicted_peak},
          {"fits", c.fits},
          {"peak_reserved", c.peak_reserved},
          {"samples_per_s", c.samples_per_s},
          {"seconds", c.seconds}};
}

PlanCandidate candidate_from(const json& j) {
  PlanCandidate c;
  c.patch = j.at("patch").get<std::vector<std::int64_t>>();
  c.predicted_peak = j.at("predicted_peak").get<std::int64_t>();
  c.fits = j.at("fits").get<bool>();
  c.peak_reserved = j.at("peak_reserved").get<std::uint64_t>();
  c.samples_per_s = j.at("samples_per_s").get<double>();
  c.seconds = j.at("seconds").get<double>();
  return c;
}

json network_json(const ResEncUNetOptions& o) {
  return {{"base_features", o.base_features()},
          {"max_features", o.max_features()},
          {"blocks_per_stage", o.blocks_per_stage()},
          {"decoder_convs", o.decoder_convs()},
          {"deep_supervision", o.deep_supervision()}};
}

ResEncUNetOptions network_from(const json& j) {
  return ResEncUNetOptions()
      .base_features(j.at("base_features").get<std::int64_t>())
      .max_features(j.at("max_features").get<std::int64_t>())
      .blocks_per_stage(j.at("blocks_per_stage").get<std::vector<std::int64_t>>())
      .decoder_convs(j.at("decoder_convs").get<std::int64_t>())
      .deep_supervision(j.at("deep_supervision").get<bool>());
}

}  // namespace

json Fingerprint::to_json() const {
  return {{"spacing", spacing},
          {"median_shape", median_shape},
          {"cases", cases},
          {"channels", channels},
          {"classes", classes}};
}

Fingerprint Fingerprint::from_json(const json& j) {
  Fingerprint f;
  f.spacing = j.at("spacing").get<std::array<double, 3>>();
  f.median_shape = j.at("median_shape").get<std::array<double, 3>>();
  f.cases = j.at("cases").get<std::int64_t>();
  f.channels = j.at("channels").get<std::int64_t>();
  f.classes = j.at("classes").get<std::int64_t>();
  return f;
}

Fingerprint fingerprint_of(const data::Plan& plan) {
  if (plan.cases.empty())
    throw ConfigError(plan.cache_dir.string() + ": the prepared dataset has no cases to plan for");
  Fingerprint f;
  // The plan's spacing is (x, y, z); its grids are (D, H, W) = (z, y, x).
  for (int i = 0; i < 3; ++i) f.spacing[static_cast<size_t>(i)] = plan.target_spacing[static_cast<size_t>(2 - i)];
  for (size_t axis = 0; axis < 3; ++axis) {
    std::vector<double> sizes;
    for (const auto& c : plan.cases) sizes.push_back(static_cast<double>(c.shape[axis]));
    std::sort(sizes.begin(), sizes.end());
    const size_t n = sizes.size();
    f.median_shape[axis] = n % 2 ? sizes[n / 2] : (sizes[n / 2 - 1] + sizes[n / 2]) / 2;  // numpy's median
  }
  f.cases = static_cast<std::int64_t>(plan.cases.size());
  f.channels = plan.channels();
  f.classes = plan.num_classes();
  return f;
}

const std::vector<NnUNetPreset>& nnunet_presets() {
  static const std::vector<NnUNetPreset> presets = {{"M", 8, 680e6, 1}, {"L", 24, 2100e6, 1}, {"XL", 40, 3600e6, 1}};
  return presets;
}

std::optional<NnUNetPreset> nnunet_preset_for(std::uint64_t visible_bytes) {
  std::optional<NnUNetPreset> out;
  const double gb = static_cast<double>(visible_bytes) / 1e9;
  for (const auto& p : nnunet_presets())
    if (p.target_gb <= gb + 0.5) out = p;  // a "24 GB" card shows a little under or over 24e9 bytes
  return out;
}

ResEncTopology resenc_topology_for(const std::vector<std::int64_t>& patch, const Fingerprint& f,
                                   const ResEncUNetOptions& base) {
  ResEncUNetOptions o = base;
  o.img_size(patch).spacing({f.spacing[0], f.spacing[1], f.spacing[2]});
  return models::resenc_plan(o);
}

std::vector<std::int64_t> nnunet_initial_patch(const Fingerprint& f, const ResEncUNetOptions& base) {
  std::array<double, 3> tmp{};
  for (size_t i = 0; i < 3; ++i) tmp[i] = 1.0 / f.spacing[i];
  const double scale = std::pow(kInitialVoxels / (tmp[0] * tmp[1] * tmp[2]), 1.0 / 3.0);
  std::vector<std::int64_t> patch(3);
  for (size_t i = 0; i < 3; ++i) {
    const double start = static_cast<double>(round_half_even(tmp[i] * scale));
    // Clipped to the median case; a median ending in .5 rounds up, as the network's divisor would.
    patch[i] = static_cast<std::int64_t>(std::ceil(std::min(start, f.median_shape[i])));
  }
  return vec(resenc_topology_for(patch, f, base).patch);
}

std::optional<std::vector<std::int64_t>> nnunet_shrink_step(const std::vector<std::int64_t>& patch,
                                                            const Fingerprint& f, const ResEncUNetOptions& base) {
  const ResEncTopology now = resenc_topology_for(patch, f, base);
  // np.argsort(...)[-1]: the largest ratio, the last axis among equals.
  size_t axis = 0;
  double largest = -1;
  for (size_t i = 0; i < 3; ++i) {
    const double ratio = static_cast<double>(patch[i]) / f.median_shape[i];
    if (ratio >= largest) largest = ratio, axis = i;
  }
  std::vector<std::int64_t> smaller = patch;
  smaller[axis] -= now.divisor[axis];
  if (smaller[axis] < 1) return std::nullopt;
  try {
    const ResEncTopology step = resenc_topology_for(smaller, f, base);
    std::vector<std::int64_t> next = patch;
    next[axis] -= step.divisor[axis];
    if (next[axis] < 1) return std::nullopt;
    return vec(resenc_topology_for(next, f, base).patch);
  } catch (const Error&) {  // too small for one pooling: the end of the order
    return std::nullopt;
  }
}

json NnUNetPlan::to_json() const {
  return {{"preset", preset},
          {"patch", patch},
          {"batch", batch},
          {"estimate", estimate},
          {"batch_by_memory", batch_by_memory},
          {"batch_by_dataset", batch_by_dataset},
          {"topology", topology_json(topology)}};
}

NnUNetPlan NnUNetPlan::from_json(const json& j) {
  NnUNetPlan p;
  p.preset = j.at("preset").get<std::string>();
  p.patch = j.at("patch").get<std::vector<std::int64_t>>();
  p.batch = j.at("batch").get<std::int64_t>();
  p.estimate = j.at("estimate").get<std::int64_t>();
  p.batch_by_memory = j.at("batch_by_memory").get<std::int64_t>();
  p.batch_by_dataset = j.at("batch_by_dataset").get<std::int64_t>();
  p.topology = topology_from(j.at("topology"));
  return p;
}

NnUNetPlan nnunet_resenc_plan(const Fingerprint& f, const NnUNetPreset& preset, const ResEncUNetOptions& base) {
  const auto estimate_of = [&](const ResEncTopology& t) {
    return models::nnunet_feature_map_size(t, base.decoder_convs(), f.classes, /*deep_supervision=*/false);
  };
  NnUNetPlan p;
  p.preset = preset.name;
  p.patch = nnunet_initial_patch(f, base);
  p.topology = resenc_topology_for(p.patch, f, base);
  p.estimate = estimate_of(p.topology);
  while (static_cast<double>(p.estimate) > preset.reference) {
    const auto next = nnunet_shrink_step(p.patch, f, base);
    if (!next) throw UnsupportedError("nnU-Net's ResEnc " + preset.name + " planner: no patch of this dataset fits");
    p.patch = *next;
    p.topology = resenc_topology_for(p.patch, f, base);
    p.estimate = estimate_of(p.topology);
  }
  p.batch_by_memory = round_half_even(preset.reference / static_cast<double>(p.estimate) * kReferenceBatch);
  const double dataset_voxels =
      f.median_shape[0] * f.median_shape[1] * f.median_shape[2] * static_cast<double>(f.cases);
  p.batch_by_dataset =
      round_half_even(dataset_voxels * preset.max_dataset_covered / static_cast<double>(voxels(p.patch)));
  p.batch = std::max(std::min(p.batch_by_memory, p.batch_by_dataset), kMinBatch);
  return p;
}

json BudgetPlan::to_json() const {
  json candidates_json = json::array();
  for (const auto& c : candidates) candidates_json.push_back(candidate_json(c));
  json j = {{"budget", budget},
            {"visible_bytes", visible_bytes},
            {"usable_bytes", usable_bytes},
            {"error", error},
            {"patch", patch},
            {"topology", patch.empty() ? json() : topology_json(topology)},
            {"batch", batch},
            {"first_failing", first_failing},
            {"samples_per_s", samples_per_s},
            {"peak_reserved", peak_reserved},
            {"peak_allocated", peak_allocated},
            {"memory_breakdown", memory_breakdown},
            {"candidates", candidates_json},
            {"candidates_in_order", candidates_in_order},
            {"probes", probes},
            {"seconds", seconds},
            {"nnunet", nnunet ? nnunet->to_json() : json()},
            {"nnunet_measured", nnunet_measured ? candidate_json(*nnunet_measured) : json()}};
  return j;
}

BudgetPlan BudgetPlan::from_json(const json& j) {
  BudgetPlan b;
  b.budget = j.at("budget").get<std::string>();
  b.visible_bytes = j.at("visible_bytes").get<std::uint64_t>();
  b.usable_bytes = j.at("usable_bytes").get<std::uint64_t>();
  b.error = j.at("error").get<std::string>();
  b.patch = j.at("patch").get<std::vector<std::int64_t>>();
  if (!j.at("topology").is_null()) b.topology = topology_from(j.at("topology"));
  b.batch = j.at("batch").get<std::int64_t>();
  b.first_failing = j.at("first_failing").get<std::int64_t>();
  b.samples_per_s = j.at("samples_per_s").get<double>();
  b.peak_reserved = j.at("peak_reserved").get<std::uint64_t>();
  b.peak_allocated = j.at("peak_allocated").get<std::uint64_t>();
  b.memory_breakdown = j.at("memory_breakdown");
  for (const auto& c : j.at("candidates")) b.candidates.push_back(candidate_from(c));
  b.candidates_in_order = j.at("candidates_in_order").get<std::int64_t>();
  b.probes = j.at("probes").get<int>();
  b.seconds = j.at("seconds").get<double>();
  if (!j.at("nnunet").is_null()) b.nnunet = NnUNetPlan::from_json(j.at("nnunet"));
  if (!j.at("nnunet_measured").is_null()) b.nnunet_measured = candidate_from(j.at("nnunet_measured"));
  return b;
}

json PlanResult::to_json() const {
  json budgets_json = json::array(), nnunet_json = json::array();
  for (const auto& b : budgets) budgets_json.push_back(b.to_json());
  for (const auto& p : nnunet) nnunet_json.push_back(p.to_json());
  return {{"dataset", dataset},
          {"model", model},
          {"precision", precision},
          {"device", device},
          {"min_batch", min_batch},
          {"fingerprint", fingerprint.to_json()},
          {"network", network_json(network)},
          {"budgets", budgets_json},
          {"nnunet", nnunet_json}};
}

PlanResult PlanResult::from_json(const json& j) {
  PlanResult r;
  r.dataset = j.at("dataset").get<std::string>();
  r.model = j.at("model").get<std::string>();
  r.precision = j.at("precision").get<std::string>();
  r.device = j.at("device").get<std::string>();
  r.min_batch = j.at("min_batch").get<std::int64_t>();
  r.fingerprint = Fingerprint::from_json(j.at("fingerprint"));
  r.network = network_from(j.at("network"));
  for (const auto& b : j.at("budgets")) r.budgets.push_back(BudgetPlan::from_json(b));
  for (const auto& p : j.at("nnunet")) r.nnunet.push_back(NnUNetPlan::from_json(p));
  return r;
}

namespace {

// The probe settings for `patch`: the network nnU-Net's rules build for it at the fingerprint's spacing.
ProbeOptions options_for(const ProbeOptions& probe, const Fingerprint& f, const std::vector<std::int64_t>& patch) {
  ProbeOptions p = probe;
  p.model_context.patch = patch;
  std::ostringstream spacing;
  spacing << f.spacing[0] << "," << f.spacing[1] << "," << f.spacing[2];
  p.model_context.params["spacing"] = spacing.str();
  return p;
}

// voxfit's own analytic peak (allocated bytes) of a training step of `patch` at `batch`. It builds
// the network on the CPU: never under a CPU budget, which would count it.
std::int64_t predicted_peak(const ProbeOptions& probe, const Fingerprint& f, const std::vector<std::int64_t>& patch,
                            std::int64_t batch) {
  const ProbeOptions p = options_for(probe, f, patch);
  const models::Network net = models::make_model(p.model, p.model_context);
  const bool fused = kernels::kernel_mode() == kernels::KernelMode::kFused && p.device.is_cuda();
  const auto b = train::predict_step_memory(*net, {batch, p.model_context.in_channels, patch[0], patch[1], patch[2]},
                                            p.step, models::KernelPaths{fused, fused && kernels::lean_decoders()});
  return static_cast<std::int64_t>(b.peak_allocated);
}

// The probes of one budget: a patch at a batch, each probed once (the search's first patch is the
// max-batch search's start).
class PatchProber {
 public:
  PatchProber(std::shared_ptr<const data::CacheIndex> index, const PlanOptions& o, const Fingerprint& f)
      : index_(std::move(index)), o_(o), f_(f) {}

  Probe operator()(const std::vector<std::int64_t>& patch, std::int64_t batch) {
    const auto key = std::make_pair(patch, batch);
    if (const auto it = done_.find(key); it != done_.end()) return it->second;
    ++probes_;
    Probe p = TrainingProbe(index_, options_for(o_.probe, f_, patch))(batch);
    done_[key] = p;
    if (o_.progress) {
      char line[200];
      std::snprintf(line, sizeof line, "  probe %s batch %lld: %s, %.2f samples/s, peak %s reserved (%.1f s)",
                    patch_text(patch).c_str(), static_cast<long long>(batch), p.fits ? "fits" : "out of memory",
                    p.samples_per_s, format_bytes(p.peak_reserved).c_str(), p.seconds);
      o_.progress(line);
    }
    return p;
  }

  int probes() const { return probes_; }

 private:
  std::shared_ptr<const data::CacheIndex> index_;
  const PlanOptions& o_;
  const Fingerprint& f_;
  int probes_ = 0;
  std::map<std::pair<std::vector<std::int64_t>, std::int64_t>, Probe> done_;
};

// nnU-Net's shrink order from its start, each patch with its analytic peak at the smallest batch.
struct ShrinkOrder {
  std::vector<std::vector<std::int64_t>> patches;
  std::vector<std::int64_t> predicted;
};

PlanCandidate candidate_of(const std::vector<std::int64_t>& patch, std::int64_t predicted, const Probe& p) {
  return {patch, predicted, p.fits, p.peak_reserved, p.samples_per_s, p.seconds};
}

// One budget: the first patch of the shrink order that trains at the smallest batch (the analytic
// peak's first guess, then galloping and bisection over the order), then the exact largest batch.
BudgetPlan plan_budget(const memory::BudgetSpec& spec, std::shared_ptr<const data::CacheIndex> index,
                       const PlanOptions& o, const Fingerprint& f, const ResEncUNetOptions& base,
                       const ShrinkOrder& order) {
  const auto t0 = std::chrono::steady_clock::now();
  BudgetPlan b;
  // nnU-Net's plan for a card of this size, predicted before the budget is in place.
  if (const auto preset = nnunet_preset_for(spec.visible_bytes)) {
    try {
      b.nnunet = nnunet_resenc_plan(f, *preset, base);
    } catch (const UnsupportedError&) {
      // no patch of this dataset for the preset
    }
  }
  const std::int64_t nnunet_predicted = b.nnunet ? predicted_peak(o.probe, f, b.nnunet->patch, b.nnunet->batch) : 0;
  const memory::ScopedBudget scoped(spec, o.probe.device);
  b.budget = spec.label();
  b.visible_bytes = scoped.report().visible_bytes;
  b.usable_bytes = scoped.report().usable_bytes;
  PatchProber prober(index, o, f);
  const auto& patches = order.patches;
  b.candidates_in_order = static_cast<std::int64_t>(patches.size());
  std::map<size_t, bool> known;
  const auto fits = [&](size_t i) {
    if (const auto it = known.find(i); it != known.end()) return it->second;
    const Probe p = prober(patches[i], o.min_batch);
    b.candidates.push_back(candidate_of(patches[i], order.predicted[i], p));
    return known[i] = p.fits;
  };
  // The first guess: the largest patch whose analytic peak is within the usable bytes.
  size_t guess = 0;
  while (guess + 1 < patches.size() && order.predicted[guess] > static_cast<std::int64_t>(b.usable_bytes)) ++guess;
  // The smallest index that fits (fitting is monotone along the order): lo fails (or is -1), hi fits.
  std::int64_t lo = -1, hi = -1;
  if (fits(guess)) {
    hi = static_cast<std::int64_t>(guess);
    for (std::int64_t step = 1; hi > 0; step *= 2) {  // gallop towards larger patches
      const std::int64_t i = std::max<std::int64_t>(0, hi - step);
      if (!fits(static_cast<size_t>(i))) {
        lo = i;
        break;
      }
      hi = i;
    }
  } else {
    lo = static_cast<std::int64_t>(guess);
    for (std::int64_t step = 1;; step *= 2) {  // gallop towards smaller ones
      const std::int64_t i = std::min<std::int64_t>(static_cast<std::int64_t>(patches.size()) - 1, lo + step);
      if (fits(static_cast<size_t>(i))) {
        hi = i;
        break;
      }
      lo = i;
      if (i + 1 == static_cast<std::int64_t>(patches.size())) break;
    }
  }
  if (hi < 0) {
    b.error = "no patch of nnU-Net's shrink order (down to " + patch_text(patches.back()) + ") trains at batch " +
              std::to_string(o.min_batch) + " under " + b.budget;
  } else {
    while (hi - lo > 1) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      (fits(static_cast<size_t>(mid)) ? hi : lo) = mid;
    }
    b.patch = patches[static_cast<size_t>(hi)];
    b.topology = resenc_topology_for(b.patch, f, base);
    SearchOptions so;
    so.usable_bytes = b.usable_bytes;
    // min_batch fits: the fit starts there.
    so.fit_batches = {o.min_batch, o.min_batch + 1};
    const SearchResult r = find_max_batch([&](std::int64_t batch) { return prober(b.patch, batch); }, so);
    b.batch = r.max_batch;
    b.first_failing = r.first_failing;
    for (const auto& p : r.probes)
      if (p.fits && p.batch == r.max_batch) {
        b.samples_per_s = p.samples_per_s;
        b.peak_reserved = p.peak_reserved;
        b.peak_allocated = p.peak_allocated;
        b.memory_breakdown = p.memory;
      }
  }
  // nnU-Net's plan trained under the budget.
  if (b.nnunet)
    b.nnunet_measured = candidate_of(b.nnunet->patch, nnunet_predicted, prober(b.nnunet->patch, b.nnunet->batch));
  b.probes = prober.probes();
  b.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return b;
}

}  // namespace

PlanResult run_plan(const data::Plan& plan, std::shared_ptr<const data::CacheIndex> index, const PlanOptions& o) {
  if (o.probe.model != "resenc_unet")
    throw ConfigError("voxfit plan: --model " + o.probe.model +
                      ": plan builds the network nnU-Net's rules give each patch; that is resenc_unet");
  if (o.budgets.empty()) throw ConfigError("voxfit plan: --budgets is required (e.g. rtx3090,a40)");
  if (o.min_batch < 1) throw ConfigError("--min-batch must be >= 1");
  PlanResult r;
  r.dataset = plan.dataset_name;
  r.model = o.probe.model;
  r.precision = train::to_string(o.probe.step.precision);
  r.device = o.probe.device.str();
  r.min_batch = o.min_batch;
  r.fingerprint = fingerprint_of(plan);
  // The widths and blocks the user gave (the patch and spacing vary per candidate), read by the
  // registry from a small instance.
  const models::Network small =
      models::make_model(o.probe.model, options_for(o.probe, r.fingerprint, {8, 8, 8}).model_context);
  r.network = dynamic_cast<const models::ResEncUNetImpl&>(*small).options();
  for (const auto& preset : nnunet_presets()) {
    try {
      r.nnunet.push_back(nnunet_resenc_plan(r.fingerprint, preset, r.network));
    } catch (const UnsupportedError&) {
      // a preset with no patch of this dataset: not listed
    }
  }
  ShrinkOrder order;
  order.patches.push_back(nnunet_initial_patch(r.fingerprint, r.network));
  while (order.patches.size() < 10000)
    if (auto next = nnunet_shrink_step(order.patches.back(), r.fingerprint, r.network))
      order.patches.push_back(*next);
    else
      break;
  for (const auto& patch : order.patches)
    order.predicted.push_back(predicted_peak(o.probe, r.fingerprint, patch, o.min_batch));
  for (const auto& spec : o.budgets) {
    if (o.progress) o.progress("budget " + spec.label());
    r.budgets.push_back(plan_budget(spec, index, o, r.fingerprint, r.network, order));
  }
  return r;
}

}  // namespace voxfit::sweep
