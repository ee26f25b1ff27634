#pragma once
// `voxfit train`: the loop around TrainStep — data from the prepared cache, learning-rate
// schedule, logs, sliding-window validation with the best checkpoint kept, resumable checkpoints,
// all under an optional memory budget.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "voxfit/data/patch_loader.h"
#include "voxfit/dist/communicator.h"
#include "voxfit/memory/budget.h"
#include "voxfit/train/lr_schedule.h"
#include "voxfit/train/sliding_window.h"
#include "voxfit/train/train_step.h"

namespace voxfit::train {

struct TrainOptions {
  std::filesystem::path cache_dir;   ///< a prepared cache (voxfit data prepare)
  std::filesystem::path output_dir;  ///< the run folder: config, plan, logs, checkpoints
  std::string model = "unet3d";
  models::ModelContext model_context;  ///< in_channels/num_classes are taken from the plan
  std::int64_t steps = 250;            ///< optimiser steps of the whole run
  std::int64_t batch = 2;
  StepOptions step;
  ScheduleOptions schedule;
  data::LoaderOptions loader;           ///< patch and batch are set from the fields above
  double validation_fraction = 0.2;     ///< of the cases, held out (training cases if none are left)
  std::optional<int> fold;              ///< --fold: of the declared folds, or of voxfit's own five (data::run_split)
  std::int64_t validate_every = 0;      ///< steps between validations (0: only at the end)
  SlidingWindowOptions sliding_window;  ///< patch set from the model's patch
  std::int64_t checkpoint_every = 0;    ///< steps between checkpoints (0: at validations and the end)
  std::int64_t log_every = 10;          ///< steps between host syncs that log; 1 logs every step exactly
  std::int64_t stop_after = 0;          ///< stop (resumably) after this step; 0: run all steps
  bool resume = false;                  ///< continue from output_dir/last.pt
  torch::Device device = torch::kCPU;
  memory::BudgetSpec budget;
  std::filesystem::path memory_snapshot;  ///< CUDA + LibTorch 2.x: allocator history pickle
  std::uint64_t seed = 0;
};

struct TrainSummary {
  std::int64_t steps_done = 0;
  double final_loss = 0;
  double best_dice = -1;  ///< -1: no validation ran
  std::vector<double> last_dice_per_class;
  double median_samples_per_s = 0;  ///< of the global batch
  std::int64_t world_size = 1;
  /// Loader wait / wall time from the first batch on (the loader keeping up with the steps).
  double data_wait_share = 0;
  double first_batch_wait_s = 0;  ///< the wait for the first batch (the workers' first fill)
  std::uint64_t peak_allocated = 0;
  std::uint64_t peak_reserved = 0;
};

/// Runs (or resumes) a training run; returns what it measured. Throws voxfit::Error on bad input.
/// With `comm`, this process is one rank of a data-parallel job: `options.batch` is per rank (the
/// global batch is batch x world size), `options.device` is this rank's device, each rank reads its
/// own shard of every global batch, gradients are averaged over the ranks during backward, rank 0
/// alone writes the run folder and validates, and the logged loss, throughput and peaks are
/// reduced over the ranks (mean loss, global samples/s, largest peak). Every rank returns the summary.
TrainSummary train_model(const TrainOptions& options, dist::Communicator* comm = nullptr);

/// Mean and per-class Dice of `step`'s network over whole cases of the cache, by sliding window
/// (reduced as MONAI's DiceMetric: summarize_dice).
DiceSummary validate(TrainStep& step, const data::Plan& plan, const std::vector<std::string>& case_ids,
                     const SlidingWindowOptions& sw);

}  // namespace voxfit::train
