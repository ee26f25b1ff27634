#include "voxfit/train/step_memory.h"

#include <torch/torch.h>

#include <algorithm>

#include "voxfit/core/host_memory.h"
#include "voxfit/models/memory_estimate.h"
#include "voxfit/train/losses.h"

namespace voxfit::train {

memory::StaticInventory static_inventory(TrainStep& step) {
  memory::StaticInventory inv;
  inv.parameters = memory::bytes_by_dtype(step.network().parameters());
  inv.buffers = memory::bytes_by_dtype(step.network().buffers());
  std::vector<torch::Tensor> state;
  for (const auto& [name, t] : step.optimizer().state()) state.push_back(t);
  inv.optimizer_state = memory::bytes_by_dtype(state);
  inv.loss_scaler = memory::bytes_by_dtype(step.scaler().state());
  return inv;
}

std::uint64_t batch_bytes(const data::Batch& batch) {
  return memory::total_bytes(memory::bytes_by_dtype({batch.image, batch.label}));
}

memory::MemoryBreakdown step_breakdown(const memory::MemoryTracker& tracker, TrainStep& step,
                                       const data::Batch& batch) {
  return memory::make_breakdown(tracker.profile(), static_inventory(step), batch_bytes(batch), batch.image.size(0));
}

namespace {

std::int64_t as_signed(std::uint64_t v) { return static_cast<std::int64_t>(v); }

std::int64_t voxels(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::size_t i = 2; i < shape.size(); ++i) n *= shape[i];
  return n;
}

// What deep_supervision_loss keeps for backward, per weighted output [B, K, spatial...]: what the
// loss keeps on it (its registry entry says), and for a lower-resolution output its
// nearest-downsampled int64 target.
memory::DtypeBytes loss_saved(const std::vector<std::vector<std::int64_t>>& outputs, const LossEntry& loss,
                              bool fused) {
  memory::DtypeBytes saved;
  const auto weights = deep_supervision_weights(outputs.size());
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (weights[i] == 0.0) continue;
    for (const auto& [dtype, bytes] : loss.saved_for_backward(outputs[i], fused)) saved[dtype] += bytes;
    if (voxels(outputs[i]) != voxels(outputs.front()))
      saved["int64"] += static_cast<std::uint64_t>(8 * outputs[i][0] * voxels(outputs[i]));
  }
  return saved;
}

memory::DtypeBytes scaled(const memory::DtypeBytes& bytes, std::uint64_t factor) {
  memory::DtypeBytes out;
  for (const auto& [dtype, b] : bytes) out[dtype] = b * factor;
  return out;
}

memory::StaticInventory predicted_statics(models::NetworkImpl& net, const StepOptions& options,
                                          const std::vector<torch::Tensor>& trainable) {
  memory::StaticInventory inv;
  inv.parameters = memory::bytes_by_dtype(net.parameters());
  inv.buffers = memory::bytes_by_dtype(net.buffers());
  // The moments are made like their parameters (zeros_like); the step counter is a float32 scalar.
  inv.optimizer_state =
      scaled(memory::bytes_by_dtype(trainable), options.optimizer.kind == OptimizerKind::kAdamW ? 2 : 1);
  inv.optimizer_state["float32"] += 4;
  inv.loss_scaler = memory::bytes_by_dtype(LossScaler(options.scaler, torch::kCPU).state());
  return inv;
}

// The most live bytes backward is predicted to reach above `base` (static + batch): at its start,
// every block's activations, what the loss keeps and the transients of the largest tensor (plus
// the largest recomputation); then, block by block in reverse, the activations of the blocks not
// yet passed, the gradients of those passed and the block's own transients (and recomputation).
std::int64_t backward_peak(const models::ActivationEstimate& act, std::int64_t other,
                           double gradient_bytes_per_parameter, double transient_factor) {
  std::int64_t kept = act.total(), recomputed = 0, gradients = 0;
  for (const auto& block : act.blocks) recomputed = std::max(recomputed, block.recomputed);
  const auto transients = [transient_factor](std::int64_t largest) {
    return static_cast<std::int64_t>(transient_factor * static_cast<double>(largest));
  };
  std::int64_t peak = kept + other + transients(act.largest_tensor) + recomputed;
  for (auto it = act.blocks.rbegin(); it != act.blocks.rend(); ++it) {
    peak = std::max(peak, kept + gradients + transients(it->largest) + it->recomputed);
    kept -= it->total();
    gradients += static_cast<std::int64_t>(gradient_bytes_per_parameter * static_cast<double>(it->parameters));
  }
  return peak;
}

}  // namespace

memory::MemoryBreakdown predict_step_memory(models::NetworkImpl& net, const std::vector<std::int64_t>& input_shape,
                                            const StepOptions& options, const models::KernelPaths& paths) {
  net.train(true);
  const auto outputs = net.output_shapes(input_shape);
  const auto compute = uses_autocast(options.precision) ? autocast_dtype(options.precision) : c10::kFloat;
  const models::ActivationEstimate act = models::estimate_activations(net, input_shape, compute, paths);
  std::vector<torch::Tensor> trainable;
  std::int64_t largest_parameter = 0;
  for (const auto& p : net.parameters())
    if (p.requires_grad()) {
      trainable.push_back(p);
      largest_parameter =
          std::max<std::int64_t>(largest_parameter, p.numel() * static_cast<std::int64_t>(p.element_size()));
    }

  memory::MemoryBreakdown b;
  b.device = "predicted";
  b.batch = input_shape[0];
  b.statics = predicted_statics(net, options, trainable);
  b.gradients = memory::bytes_by_dtype(trainable);
  const std::int64_t batch = input_shape[0] * voxels(input_shape);
  const std::int64_t batch_bytes = batch * input_shape[1] * 4 + batch * 8;  // float32 image, int64 label
  b.parts = {{"parameters", "static", as_signed(memory::total_bytes(b.statics.parameters))},
             {"optimizer state", "static", as_signed(memory::total_bytes(b.statics.optimizer_state))},
             {"buffers", "static", as_signed(memory::total_bytes(b.statics.buffers))},
             {"loss scaler", "static", as_signed(memory::total_bytes(b.statics.loss_scaler))},
             {"batch", "inputs", batch_bytes},
             {"unattributed", "unattributed", 0}};
  const std::int64_t before_forward = as_signed(b.statics.total()) + batch_bytes;
  // The ATen loss frees the outputs after its forward (it keeps float32 copies); the fused one keeps them.
  const std::int64_t other =
      as_signed(memory::total_bytes(loss_saved(outputs, find_loss(options.loss.name), paths.fused_kernels))) -
      (paths.fused_kernels ? 0 : models::total_bytes(act.outputs));
  const std::int64_t gradients = as_signed(memory::total_bytes(b.gradients));
  std::int64_t block_parameters = 0;
  for (const auto& block : act.blocks) block_parameters += block.parameters;
  const std::int64_t backward =
      before_forward + backward_peak(act, other,
                                     block_parameters == 0
                                         ? 0.0
                                         : static_cast<double>(gradients) / static_cast<double>(block_parameters),
                                     backward_transients(paths));
  const std::int64_t optimizer_peak = before_forward + gradients + 2 * largest_parameter;
  const std::int64_t peak = std::max(backward, optimizer_peak);
  b.peak_phase = backward >= optimizer_peak ? "backward" : "optimizer_step";
  // Split as a measured backward peak is, whichever moment is the largest, so that the blocks
  // always line up with a measurement: workspace is what the peak holds above the forward's end.
  for (const auto& block : act.blocks) b.parts.push_back({block.name, "activations", block.total()});
  b.parts.push_back({"other activations", "activations", other});
  b.parts.push_back({"workspace", "workspace", peak - before_forward - act.total() - other});
  b.peak_allocated = static_cast<std::uint64_t>(peak);
  b.peak_reserved = b.peak_allocated;
  return b;
}

memory::MemoryBreakdown measure_step_memory(models::Network net, const std::vector<std::int64_t>& input_shape,
                                            torch::Device device, StepOptions options, int steps) {
  options.spatial_augment.reset();
  net->train(true);
  const std::int64_t classes = net->output_shapes(input_shape).front()[1];
  data::Batch batch;
  {
    // Host memory, as the loader's batches are: the step's device copy is what a budget charges.
    const HostMemoryScope host;
    std::vector<std::int64_t> label_shape = input_shape;
    label_shape[1] = 1;
    batch = {torch::randn(input_shape), torch::randint(0, classes, label_shape, torch::kLong)};
  }
  memory::MemoryTracker tracker(device);
  TrainStep step(std::move(net), device, options, &tracker);
  tracker.watch_parameters(step.trainable_parameters());
  step.run(batch, options.optimizer.lr, 0);
  tracker.reset();
  for (int i = 1; i <= steps; ++i) step.run(batch, options.optimizer.lr, i);
  return step_breakdown(tracker, step, batch);
}

}  // namespace voxfit::train
