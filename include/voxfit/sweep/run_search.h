#pragma once
// The probe settings a training run implies, and `voxfit train --batch max`: the sweep's max-batch
// search (search_point) on one run's exact settings, cases and budget.
#include <memory>

#include "voxfit/data/plan.h"
#include "voxfit/sweep/isolated_probe.h"
#include "voxfit/sweep/point_result.h"
#include "voxfit/sweep/training_probe.h"
#include "voxfit/train/trainer.h"

namespace voxfit::sweep {

/// A probe that trains as the run `o` would: its network and model context (channels and classes
/// from `plan`), step (precision, optimiser, kernels), loader, device and seed.
ProbeOptions probe_options(const train::TrainOptions& o, const data::Plan& plan);

/// What a search on the run `o` probes: the plan of its cache, the training part of its split
/// (data::run_split) and probe_options().
struct RunSearch {
  data::Plan plan;
  std::shared_ptr<const data::CacheIndex> index;
  ProbeOptions probe;
};
RunSearch run_search(const train::TrainOptions& o, bool data_parallel);

/// The largest batch the run `o` trains at under its budget (search_point's entry, no throughput
/// table; every probe through `isolated` when set). Throws BudgetError when not even batch 1 fits.
PointResult search_max_batch(const train::TrainOptions& o, bool data_parallel, const IsolatedProbe& isolated);

}  // namespace voxfit::sweep
