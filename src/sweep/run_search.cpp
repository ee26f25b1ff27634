#include "voxfit/sweep/run_search.h"

#include "voxfit/core/error.h"
#include "voxfit/sweep/sweep.h"

namespace voxfit::sweep {

ProbeOptions probe_options(const train::TrainOptions& o, const data::Plan& plan) {
  ProbeOptions p;
  p.model = o.model;
  p.model_context = o.model_context;
  p.model_context.in_channels = plan.channels();
  p.model_context.num_classes = plan.num_classes();
  p.step = o.step;
  p.loader = o.loader;
  p.device = o.device;
  p.seed = o.seed;
  return p;
}

RunSearch run_search(const train::TrainOptions& o, bool data_parallel) {
  RunSearch s{data::load_plan(o.cache_dir), nullptr, {}};
  s.probe = probe_options(o, s.plan);
  s.probe.data_parallel = data_parallel;
  s.index = data::CacheIndex::load(s.plan, data::run_split(s.plan, o.validation_fraction, o.seed, o.fold).train);
  return s;
}

PointResult search_max_batch(const train::TrainOptions& o, bool data_parallel, const IsolatedProbe& isolated) {
  const RunSearch s = run_search(o, data_parallel);
  auto e = search_point(s.plan, s.index, s.probe, o.budget, kMaxBatchCap, /*throughput_table=*/false, isolated);
  if (e.max_batch < 1) throw BudgetError("--batch max: not even batch 1 trains under " + o.budget.label());
  return e;
}

}  // namespace voxfit::sweep
