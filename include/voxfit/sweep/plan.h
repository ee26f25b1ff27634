#pragma once
// `voxfit plan`: the largest patch and batch that train on each budget, planned as nnU-Net plans
// (nnunetv2's ResEnc planners: a start in the shape of the median case, a shrink order, a network
// per patch) but with every candidate decided by real training steps under the budget. Beside it,
// nnU-Net's own plans for the same fingerprint (its feature-map estimate against its reference
// values, ported exactly and checked against nnunetv2 2.8.1) and how nnU-Net's plan fares on the
// budget when trained.
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "voxfit/data/plan.h"
#include "voxfit/memory/budget.h"
#include "voxfit/models/nets/resenc_unet.h"
#include "voxfit/sweep/training_probe.h"

namespace voxfit::sweep {

/// What nnU-Net's planners read of a dataset, in voxfit's (D, H, W) axis order: the target spacing,
/// the median shape of the preprocessed cases, how many there are, input channels and classes.
struct Fingerprint {
  std::array<double, 3> spacing{1.0, 1.0, 1.0};  ///< mm
  std::array<double, 3> median_shape{};          ///< voxels (a median of an even count may end in .5)
  std::int64_t cases = 0;
  std::int64_t channels = 1;
  std::int64_t classes = 2;

  nlohmann::json to_json() const;
  static Fingerprint from_json(const nlohmann::json& j);
};
/// The fingerprint of a prepared cache: its target spacing and its cases' preprocessed shapes.
Fingerprint fingerprint_of(const data::Plan& plan);

/// One of nnU-Net's Residual Encoder presets (residual_encoder_unet_planners.py): the GPU memory
/// it targets, its reference value for the feature-map estimate at batch 2, and how much of the
/// dataset one batch may cover.
struct NnUNetPreset {
  std::string name;  ///< "M", "L", "XL"
  double target_gb = 0;
  double reference = 0;
  double max_dataset_covered = 1;
};
/// M (8 GB, 680e6), L (24 GB, 2.1e9), XL (40 GB, 3.6e9).
const std::vector<NnUNetPreset>& nnunet_presets();
/// The preset planned for a card of `visible_bytes`: the largest whose target is not above it
/// (none below 8 GB).
std::optional<NnUNetPreset> nnunet_preset_for(std::uint64_t visible_bytes);

/// The network nnU-Net's rules build for `patch` with `base`'s widths and blocks at the
/// fingerprint's spacing (resenc_plan: the patch comes back rounded up to its divisor).
models::ResEncTopology resenc_topology_for(const std::vector<std::int64_t>& patch, const Fingerprint& f,
                                           const models::ResEncUNetOptions& base);
/// nnU-Net's first 3d_fullres patch: 256^3 voxels in the spacing's aspect, clipped to the median
/// shape, rounded up to its network's divisor.
std::vector<std::int64_t> nnunet_initial_patch(const Fingerprint& f, const models::ResEncUNetOptions& base);
/// One step of nnU-Net's shrink order: the axis whose patch is largest against the median shape
/// loses its divisor (the divisor of the smaller patch's network), and the patch is rounded to its
/// network again. None when that axis cannot shrink any more (the network would not pool).
std::optional<std::vector<std::int64_t>> nnunet_shrink_step(const std::vector<std::int64_t>& patch,
                                                            const Fingerprint& f,
                                                            const models::ResEncUNetOptions& base);

/// nnU-Net's plan: the largest patch of the shrink order whose estimate is within the preset's
/// reference, and batch round(reference / estimate * 2), capped by the dataset, at least 2.
struct NnUNetPlan {
  std::string preset;
  std::vector<std::int64_t> patch;
  std::int64_t batch = 0;
  std::int64_t estimate = 0;          ///< nnunet_feature_map_size of the plan's network
  std::int64_t batch_by_memory = 0;   ///< round(reference / estimate * 2)
  std::int64_t batch_by_dataset = 0;  ///< round(dataset voxels * max covered / patch voxels)
  models::ResEncTopology topology;

  nlohmann::json to_json() const;
  static NnUNetPlan from_json(const nlohmann::json& j);
};
NnUNetPlan nnunet_resenc_plan(const Fingerprint& f, const NnUNetPreset& preset, const models::ResEncUNetOptions& base);

/// A patch tried by the search, at the plan's smallest batch.
struct PlanCandidate {
  std::vector<std::int64_t> patch;
  std::int64_t predicted_peak = 0;  ///< voxfit's analytic peak (allocated bytes) at the smallest batch
  bool fits = false;
  std::uint64_t peak_reserved = 0;
  double samples_per_s = 0;
  double seconds = 0;
};

/// What the plan found for one budget.
struct BudgetPlan {
  std::string budget;  ///< BudgetSpec::label()
  std::uint64_t visible_bytes = 0;
  std::uint64_t usable_bytes = 0;
  std::string error;  ///< set where not even the smallest candidate trains at the smallest batch
  std::vector<std::int64_t> patch;
  models::ResEncTopology topology;
  std::int64_t batch = 0;          ///< the exact largest batch at the patch
  std::int64_t first_failing = 0;  ///< batch + 1, seen failing
  double samples_per_s = 0;        ///< at the largest batch
  std::uint64_t peak_reserved = 0, peak_allocated = 0;
  nlohmann::json memory_breakdown;        ///< at the largest batch (MemoryBreakdown::to_json)
  std::vector<PlanCandidate> candidates;  ///< patches probed, in the order run
  std::int64_t candidates_in_order = 0;   ///< patches in the shrink order from nnU-Net's start
  int probes = 0;                         ///< training probes in all (patches and batches)
  double seconds = 0;
  /// nnU-Net's plan for a card of this size (nnunet_preset_for) and the probe of it on the budget.
  std::optional<NnUNetPlan> nnunet;
  std::optional<PlanCandidate> nnunet_measured;

  nlohmann::json to_json() const;
  static BudgetPlan from_json(const nlohmann::json& j);
};

struct PlanResult {
  std::string dataset;
  std::string model;  ///< resenc_unet
  std::string precision;
  std::string device;
  std::int64_t min_batch = 2;
  Fingerprint fingerprint;
  models::ResEncUNetOptions network;  ///< widths and blocks (the patch and spacing come per budget)
  std::vector<BudgetPlan> budgets;
  std::vector<NnUNetPlan> nnunet;  ///< nnU-Net's plans for M, L and XL

  nlohmann::json to_json() const;
  static PlanResult from_json(const nlohmann::json& j);
};

struct PlanOptions {
  std::vector<memory::BudgetSpec> budgets;
  std::int64_t min_batch = 2;
  /// The probes' settings (the run's network options, step, loader, device, seed); the patch and
  /// the network's spacing are set per candidate.
  ProbeOptions probe;
  /// A progress line per probe (if set).
  std::function<void(const std::string& line)> progress;
};

/// Plans `plan`'s dataset (its training cases in `index`) for every budget. The model must be
/// resenc_unet (nnU-Net's planners build that network per patch).
PlanResult run_plan(const data::Plan& plan, std::shared_ptr<const data::CacheIndex> index, const PlanOptions& options);

/// DIR/plan.json (PlanResult::to_json), DIR/plan.md (the table and nnU-Net's beside it), DIR/plan.svg
/// (measured peaks against each budget) and DIR/nnUNetPlans_voxfit.json (nnunet_plans_file), each
/// written atomically.
void write_plan_outputs(const PlanResult& result, const data::Plan& plan, const std::filesystem::path& dir);

/// An nnU-Net v2 plans file with one 3d_fullres-style configuration per planned budget
/// ("3d_fullres_rtx3090", ...): patch, batch, spacing and the ResidualEncoderUNet's arch_kwargs,
/// which nnunetv2's PlansManager loads and get_network_from_plans builds.
nlohmann::json nnunet_plans_file(const PlanResult& result, const data::Plan& plan);

}  // namespace voxfit::sweep
