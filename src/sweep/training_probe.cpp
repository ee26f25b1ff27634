#include "voxfit/sweep/training_probe.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>

#include "voxfit/core/error.h"
#include "voxfit/memory/memory_tracker.h"
#include "voxfit/memory/oom.h"
#include "voxfit/train/step_memory.h"

namespace voxfit::sweep {

using Clock = std::chrono::steady_clock;

TrainingProbe::TrainingProbe(std::shared_ptr<const data::CacheIndex> index, ProbeOptions options)
    : index_(std::move(index)),
      options_(std::move(options)),
      baseline_(memory::current_allocated_bytes(options_.device)) {}

Probe TrainingProbe::run(std::int64_t batch, double& setup_seconds) {
  const auto& o = options_;
  const auto t_setup = Clock::now();
  memory::MemoryTracker tracker(o.device);
  tracker.reset();
  // One real batch, drawn before anything else and reused by every step: the memory a probe
  // needs is then the same on every run (no prefetch queue racing the model for the budget).
  data::LoaderOptions lo = o.loader;
  const auto& patch = o.model_context.patch;
  if (patch.size() != 3) throw ConfigError("a training probe needs a 3D patch");
  lo.patch = {patch[0], patch[1], patch[2]};  // the network's input size, whatever the loader's default
  lo.batch_size = batch;
  lo.threads = 1;
  lo.prefetch = 1;
  const data::Batch data = data::PatchLoader(index_, lo).next();
  torch::manual_seed(o.seed);
  train::TrainStep step(models::make_model(o.model, o.model_context), o.device, o.step, &tracker);
  tracker.watch_parameters(step.trainable_parameters());
  torch::Tensor buckets;  // dist::GradientSynchronizer's flat buffers, same size and device
  if (o.data_parallel) {
    std::int64_t bytes = 0;
    for (const auto& t : step.trainable_parameters()) bytes += t.numel() * static_cast<std::int64_t>(t.element_size());
    buckets = torch::empty({bytes}, torch::TensorOptions().dtype(torch::kUInt8).device(o.device));
  }
  setup_seconds = std::chrono::duration<double>(Clock::now() - t_setup).count();
  std::vector<double> times;
  double first_step = 0;
  const auto sync = [&] {
    if (o.device.is_cuda()) torch::cuda::synchronize(o.device.index() < 0 ? 0 : o.device.index());
  };
  for (int s = 0; s < o.warmup_steps + o.timed_steps; ++s) {
    const auto t0 = Clock::now();
    step.run(data, step.optimizer().options().lr, s);
    sync();
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s == 0) first_step = t;
    if (s >= o.warmup_steps) times.push_back(t);
  }
  const auto profile = tracker.profile();
  Probe p;
  p.memory = train::step_breakdown(tracker, step, data).to_json();
  p.batch = batch;
  p.fits = true;
  p.peak_allocated = profile.peak_allocated;
  p.peak_reserved = profile.peak_reserved;
  p.setup_seconds = setup_seconds;
  p.first_step_seconds = first_step;
  std::sort(times.begin(), times.end());
  p.samples_per_s = times.empty() ? 0 : static_cast<double>(batch) / times[times.size() / 2];
  return p;
}

Probe TrainingProbe::operator()(std::int64_t batch) {
  const auto t0 = Clock::now();
  Probe p;
  double setup_seconds = 0;  // kept when the probe runs out of memory
  try {
    p = run(batch, setup_seconds);
  } catch (const std::exception& e) {
    // Everything the failed probe made (network, optimiser, activations, loader) is out of scope here.
    if (!memory::is_oom(e)) throw;
    p = Probe{};
    p.batch = batch;
    p.fits = false;
    const std::string what = e.what();
    p.error = what.substr(0, what.find('\n'));
    p.setup_seconds = setup_seconds;
  }
  memory::recover_after_oom(options_.device);
  // cuBLAS/cuDNN keep their workspaces from the first probe on; after that, live memory must not grow.
  const std::uint64_t after = memory::current_allocated_bytes(options_.device);
  if (probes_ > 0 && after > after_previous_) ++leaks_;
  after_previous_ = after;
  ++probes_;
  p.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return p;
}

}  // namespace voxfit::sweep
