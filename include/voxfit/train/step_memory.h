#pragma once
// What a training step holds across steps, and its batch, as the memory breakdown counts them;
// and the breakdown of a step predicted before anything runs, beside one measured.
#include <cstdint>
#include <vector>

#include "voxfit/data/patch_loader.h"
#include "voxfit/memory/memory_breakdown.h"
#include "voxfit/models/memory_estimate.h"
#include "voxfit/train/train_step.h"

namespace voxfit::train {

/// Parameters, optimiser state, buffers (norm statistics) and loss-scaler state of `step`, per dtype.
memory::StaticInventory static_inventory(TrainStep& step);

/// Bytes of the batch as the step holds it on its device (image + label, same dtypes as the loader's).
std::uint64_t batch_bytes(const data::Batch& batch);

/// The breakdown of `tracker`'s profile for steps of `step` on batches like `batch`.
memory::MemoryBreakdown step_breakdown(const memory::MemoryTracker& tracker, TrainStep& step, const data::Batch& batch);

/// The breakdown of one training step of `net` on inputs of `input_shape` ([B, C, D, H, W]) with
/// `options` (precision, optimiser), predicted from shapes and dtypes (nothing runs), with the parts
/// a measured breakdown has (memory::make_breakdown), at the largest of these moments:
/// - backward begins: static + batch + every block's saved activations (models::estimate_activations)
///   + other activations (what the loss keeps, less the network outputs it does not) + transients
///   of backward_transients(paths) x the largest activation tensor + the largest recomputation of a
///   checkpointed block (models::BlockActivations::recomputed);
/// - backward passes block i (blocks in reverse): static + batch + the activations of blocks 0..i +
///   the gradients of the blocks after i (their parameters, at the trainable parameters' bytes per
///   element) + block i's transients (the same factor x its largest tensor) and recomputation;
/// - optimiser step: static + batch + gradients (one per trainable parameter, its dtype) +
///   2 x the largest parameter (AdamW's denominator; SGD's decayed and Nesterov gradients).
/// The peak is split as a measured backward peak is, whichever moment it is (peak_phase says which):
/// blocks, other activations, and workspace = what the peak holds above the end of the forward.
/// Static: parameters and buffers as the network holds them, AdamW's two float32 moments a
/// parameter (SGD: one momentum buffer) and a step counter, the loss scaler's scale and tracker.
/// device is "predicted". Throws UnsupportedError for networks without an analytic model.
/// `paths`: which of voxfit's CUDA paths the forward runs (models::estimate_activations).
memory::MemoryBreakdown predict_step_memory(models::NetworkImpl& net, const std::vector<std::int64_t>& input_shape,
                                            const StepOptions& options, const models::KernelPaths& paths = {});
/// Backward's transient gradients in units of the largest activation tensor L (in the UNets, the
/// last decoder stage's concatenation): its gradient (L), the gradient out of the conv that reads
/// it (L/2) and what the other ops of the stage hold meanwhile. Fitted to CPU measurements of
/// unet3d and unetr (2.22 to 2.27 at batch 1 and 2, 32^3 and 64^3), not derived op by op.
inline constexpr double kBackwardTransients = 2.25;
/// The same on voxfit's fused CUDA path (KernelPaths::fused_kernels), whose norm backward writes dx
/// in one pass and whose loss backward writes one gradient: fitted to H100 measurements of unet3d
/// (0.77 L at batch 1 and 4, channels-last) and unetr (2.4 L) in fp16 at 96^3
/// (experiments/memory/results/h100/fused-loss/), the value that puts both peaks within 8%.
inline constexpr double kBackwardTransientsFused = 1.5;
/// The factor predict_step_memory uses for `paths`.
inline double backward_transients(const models::KernelPaths& paths) {
  return paths.fused_kernels ? kBackwardTransientsFused : kBackwardTransients;
}

/// The breakdown measured over `steps` real training steps of `net` on `device` with `options`, on
/// a random batch of `input_shape` (labels drawn over the network's classes), spatial augmentation
/// off. The steps follow one unmeasured step: the one in which cuDNN's benchmark tries its
/// algorithms (each with its own workspace) and the optimizer makes its state, so that what is
/// measured is the step that training repeats. Needs what MemoryTracker needs (CPU: a live
/// ScopedCpuBudget).
memory::MemoryBreakdown measure_step_memory(models::Network net, const std::vector<std::int64_t>& input_shape,
                                            torch::Device device, StepOptions options, int steps = 1);

}  // namespace voxfit::train
