#pragma once
// Sweeps: every combination of models x patches x precisions x checkpointing x budgets gets a
// max-batch search and a throughput table, journalled to DIR/results.jsonl (journal.h), then
// reported as results.csv, summary.md (budgets side by side) and PNG plots (report.h).
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "voxfit/memory/budget.h"
#include "voxfit/sweep/isolated_probe.h"
#include "voxfit/sweep/journal.h"
#include "voxfit/sweep/point_result.h"
#include "voxfit/sweep/training_probe.h"

namespace voxfit::sweep {

struct SweepGrid {
  std::vector<std::string> models{"unetr"};
  std::vector<std::vector<std::int64_t>> patches{{96, 96, 96}};
  std::vector<train::Precision> precisions{train::Precision::kFp16};
  std::vector<models::CheckpointMode> checkpointing{models::CheckpointMode::kNone};
  std::vector<memory::BudgetSpec> budgets;  ///< at least one
};

struct SweepOptions {
  std::filesystem::path cache_dir;
  std::filesystem::path output_dir;
  SweepGrid grid;
  ProbeOptions probe;  ///< model/patch/precision/checkpoint are set per point
  std::int64_t max_batch = kMaxBatchCap;
  bool throughput_table = true;  ///< also time powers of two below the maximum
  /// Model parameters per model name (e.g. unet3d: stages=5), applied where the model has them.
  std::map<std::string, std::map<std::string, std::string>> model_params;
  /// The memory layout per model name (`--channels-last` as each network resolves it: auto is
  /// per network); a model not listed runs NCDHW.
  std::map<std::string, bool> channels_last;
  /// The optimiser per model name, as the run options resolve it (the user's --optimizer, --lr,
  /// ... over each network's default); a model not listed trains with its default.
  std::map<std::string, train::OptimizerOptions> optimizers;
  /// The probes draw their patches from the training part of the split a run makes (run_split).
  double validation_fraction = 0.2;
  std::optional<int> fold;  ///< --fold, as train's
  /// Distributed sweeps: run only the points whose index in the grid (models, then patches,
  /// precisions, checkpointing, budgets) is shard modulo shards; the rest belong to other
  /// processes (a Slurm array task, a local GPU) whose journals merge_journals() joins.
  std::size_t shard = 0;
  std::size_t shards = 1;
  /// Set: every probe of the point with this key runs through the returned IsolatedProbe
  /// (the CLI's --isolate); empty: probes run in this process.
  std::function<IsolatedProbe(const std::string& key)> isolate;
  /// Progress lines (if set): "point 3/8 KEY, ETA 4m10s" before each point this run measures, and
  /// a line per probe.
  std::function<void(const std::string& line)> progress;
};

/// Points in the grid.
std::size_t grid_size(const SweepGrid& grid);

/// The journal key of a point: "unetr|96x96x96|fp16|none|rtx3090".
std::string point_key(const std::string& model, const std::vector<std::int64_t>& patch, train::Precision precision,
                      models::CheckpointMode checkpoint, const memory::BudgetSpec& budget);

/// Runs the points not yet in the journal, then rewrites the reports from the whole journal.
/// `on_point` (if set) sees each new journal entry.
void run_sweep(const SweepOptions& options, const std::function<void(const PointResult&)>& on_point = {});

/// One search on the current settings (used by the sweep and by `voxfit train --batch max`). With
/// `isolated` set, every probe runs through it and this process installs no budget. With
/// `probe_journal` set, every probe is appended to that file as it finishes, and the probes it
/// already holds for this point (same key and usable bytes: a run stopped mid-search) are taken
/// from it instead of being run again; the search, being a function of its probes' results, then
/// retraces its path and goes on. The entry says how many probes were taken (`resumed_probes`).
/// `progress` (if set) gets a line per probe measured.
PointResult search_point(const data::Plan& plan, std::shared_ptr<const data::CacheIndex> index,
                         const ProbeOptions& probe, const memory::BudgetSpec& budget, std::int64_t max_batch,
                         bool throughput_table, const IsolatedProbe& isolated = {},
                         const std::filesystem::path& probe_journal = {},
                         const std::function<void(const std::string& line)>& progress = {});

/// What the process of an isolated probe does: installs the budget and returns
/// {"budget_report": ...}, plus {"probe": ...} (batch_search's to_json) when batch >= 1, after one
/// TrainingProbe at that batch (running out of memory is a result, fits = false).
nlohmann::json run_probe_here(std::shared_ptr<const data::CacheIndex> index, const ProbeOptions& probe,
                              const memory::BudgetSpec& budget, std::int64_t batch);

/// run_probe_here() for the grid point of `options` whose journal key is `key` (the process of a
/// sweep's isolated probe). Throws ConfigError when the grid has no such point.
nlohmann::json run_sweep_probe(const SweepOptions& options, const std::string& key, std::int64_t batch);

}  // namespace voxfit::sweep
