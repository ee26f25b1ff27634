#pragma once
// One optimiser step of a segmentation network on a batch: the unit that training, the max-batch
// search and the benchmarks all run, so that a probe measures exactly what a run does.
#include <torch/types.h>

#include <memory>
#include <optional>

#include "voxfit/core/cuda_graph.h"
#include "voxfit/data/patch_loader.h"
#include "voxfit/data/spatial_augment.h"
#include "voxfit/dist/grad_sync.h"
#include "voxfit/memory/memory_tracker.h"
#include "voxfit/models/network.h"
#include "voxfit/train/loss_scaler.h"
#include "voxfit/train/losses.h"
#include "voxfit/train/optimizer.h"
#include "voxfit/train/precision.h"

namespace voxfit::train {

struct StepOptions {
  Precision precision = Precision::kFp32;
  LossOptions loss;  ///< the registered loss (train/losses.h) and its settings
  OptimizerOptions optimizer;
  LossScalerOptions scaler;    ///< `enabled` is set from the precision
  bool channels_last = false;  ///< inputs in ChannelsLast3d (build the network with ModelContext::channels_last too)
  /// Rotation/scaling on the step's device (nnU-Net's p = 0.2); unset: none.
  std::optional<data::SpatialAugmentOptions> spatial_augment = data::SpatialAugmentOptions{};
  std::uint64_t seed = 0;  ///< seeds the spatial augmentation of step i with (seed, i)
  /// CUDA builds: after `graph_warmup_steps` eager steps of one batch shape, record forward, loss,
  /// backward, loss scaling, clipping and the optimiser as one CUDA graph and replay it for every
  /// later step of that shape (the batch is copied into the graph's input buffers; the learning
  /// rate is read from a device scalar). Applies where the whole step can run without the host:
  /// fused AdamW on LibTorch >= 2.2, one process (no gradient sync); elsewhere steps stay eager.
  bool cuda_graph = false;
  int graph_warmup_steps = 3;
};

/// The result of a step, left on the device (reading it syncs; the loop does so every N steps).
struct StepOutput {
  torch::Tensor loss;       ///< float32 scalar, unscaled
  torch::Tensor found_inf;  ///< float32 [1]: 1 when fp16 gradients overflowed and the step was skipped
};

class TrainStep {
 public:
  /// Moves the network to `device` and builds its optimiser.
  /// `tracker`, if given, sees the forward, backward and optimiser phases of every step.
  TrainStep(models::Network network, torch::Device device, StepOptions options,
            memory::MemoryTracker* tracker = nullptr);

  /// Trains on `batch` (host or device tensors) with learning rate `lr`; `index` seeds augmentation.
  StepOutput run(const data::Batch& batch, double lr, std::int64_t index);

  models::NetworkImpl& network() { return *network_; }
  const models::Network& network_ptr() const { return network_; }
  Optimizer& optimizer() { return optimizer_; }
  LossScaler& scaler() { return scaler_; }
  const StepOptions& options() const { return options_; }
  torch::Device device() const { return device_; }

  /// Data parallelism: gradients are averaged over the ranks by `sync` (built on this step's
  /// trainable parameters) between backward and the optimiser; nullptr: a single process.
  void set_gradient_sync(dist::GradientSynchronizer* sync) { sync_ = sync; }
  /// The parameters the optimiser trains, in registration order.
  std::vector<torch::Tensor> trainable_parameters() const;

  /// Forward of an eval-mode network on `x` (autocast as in training), full-resolution logits.
  torch::Tensor infer(const torch::Tensor& x);

  /// True once the step runs as a captured CUDA graph (StepOptions::cuda_graph).
  bool graphed() const { return graph_ != nullptr; }
  /// Pauses (false) or resumes (true) the graph: paused, steps run eagerly on the same network,
  /// optimiser and loss scaler (`cards profile` times replays, then profiles eager steps).
  void set_cuda_graph(bool on) { options_.cuda_graph = on; }

 private:
  /// Copies the loader's batch to the device, augments it and sets its memory format.
  data::Batch device_batch(const data::Batch& host_batch, std::int64_t index) const;
  /// Forward, backward and the optimiser on a device batch; the learning rate is `lr` or, where
  /// given, the device scalar `lr_on_device` (what a captured graph reads at replay).
  StepOutput compute(const data::Batch& batch, double lr, const torch::Tensor* lr_on_device);
  /// Whether this step should replay (capturing first, where due) a CUDA graph.
  bool use_graph(const data::Batch& batch) const;
  /// Records the graph; false (steps stay eager, one line on stderr says why) if it cannot be.
  bool capture(const data::Batch& batch, double lr);

  models::Network network_;
  torch::Device device_;
  StepOptions options_;
  Optimizer optimizer_;
  LossScaler scaler_;
  memory::MemoryTracker* tracker_;
  dist::GradientSynchronizer* sync_ = nullptr;
  // CUDA graph of the step: its input buffers, learning rate and outputs keep their addresses.
  std::unique_ptr<core::CapturedStep> graph_;
  data::Batch graph_batch_;
  torch::Tensor graph_lr_;
  StepOutput graph_out_;
  std::int64_t eager_steps_ = 0;
  bool graph_failed_ = false;
};

/// Checks that `precision` can run on `device` (fp16 autocast needs CUDA: LibTorch's CPU autocast
/// has bf16 only); throws UnsupportedError otherwise.
void check_precision_supported(Precision precision, torch::Device device);

}  // namespace voxfit::train
