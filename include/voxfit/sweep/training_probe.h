#pragma once
// A probe that answers "does batch b train under the budget, and how fast?" by training: a fresh
// network and optimiser, a real batch of patches from the loader, warm-up and timed optimiser steps
// with the same precision, checkpointing and attention as a run, under the active memory budget.
// samples/s is the training step's own speed (the loader's share is measured by `voxfit train`).
#include <memory>
#include <string>
#include <vector>

#include "voxfit/data/patch_loader.h"
#include "voxfit/sweep/batch_search.h"
#include "voxfit/train/train_step.h"

namespace voxfit::sweep {

struct ProbeOptions {
  std::string model;
  models::ModelContext model_context;  ///< channels/classes from the plan
  train::StepOptions step;
  data::LoaderOptions loader;  ///< batch_size is set per probe
  torch::Device device = torch::kCPU;
  int warmup_steps = 2;  ///< not timed (cuDNN autotuning, allocator warm-up)
  int timed_steps = 3;   ///< timed; the median gives samples/s
  std::uint64_t seed = 0;
  /// A per-GPU search for a data-parallel job: the probe also holds what each rank holds beyond a
  /// single process, the gradient buckets (one flat copy of the trainable parameters' gradients).
  bool data_parallel = false;
};

/// Callable as a ProbeFn. A budget (memory::ScopedBudget) must be alive around the calls.
class TrainingProbe {
 public:
  TrainingProbe(std::shared_ptr<const data::CacheIndex> index, ProbeOptions options);
  Probe operator()(std::int64_t batch);
  /// Live bytes when the probe object was made: every probe must return to it (tested).
  std::uint64_t baseline_bytes() const { return baseline_; }
  /// Probes after which live memory was higher than after the probe before (a leak; stays 0).
  /// The first probe may leave library workspaces (cuBLAS, cuDNN) behind; they are not a leak.
  int leaks() const { return leaks_; }

 private:
  Probe run(std::int64_t batch, double& setup_seconds);  // sets setup_seconds before the steps
  std::shared_ptr<const data::CacheIndex> index_;
  ProbeOptions options_;
  std::uint64_t baseline_ = 0;
  int leaks_ = 0;
  int probes_ = 0;
  std::uint64_t after_previous_ = 0;
};

}  // namespace voxfit::sweep
