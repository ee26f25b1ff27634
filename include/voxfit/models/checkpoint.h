#pragma once
// Activation checkpointing for the C++ frontend (LibTorch has no torch::utils::checkpoint):
// a block runs without keeping its activations and runs again inside backward.
#include <torch/types.h>

#include <functional>
#include <vector>

#include "voxfit/models/network.h"

namespace voxfit::models {

using BlockFn = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

/// Runs `fn(inputs)` under no-grad and keeps only `inputs`; backward recomputes `fn` with grad
/// (restoring the forward's autocast state, which backward threads do not inherit) and
/// backpropagates through the recomputation. Parameter gradients accumulate as without
/// checkpointing and are bitwise the same on CPU, since the same kernels run on the same values.
/// `fn` must be deterministic (no dropout) and must not outlive what it captures; BatchNorm
/// running statistics are updated twice, as with PyTorch's checkpoint.
std::vector<torch::Tensor> checkpoint(const BlockFn& fn, const std::vector<torch::Tensor>& inputs);

/// Single-tensor convenience form.
torch::Tensor checkpoint(const std::function<torch::Tensor(const torch::Tensor&)>& fn, const torch::Tensor& x);

/// Identity whose backward makes the gradient contiguous. Put it where a tensor fans out to a
/// branch whose gradient comes back permuted (UNETR's token -> volume skips): the engine sums a
/// fan-out's gradients in graph order and the sum takes the first one's layout, so without it the
/// layout, and with it the GEMM rounding downstream, would depend on what is checkpointed.
torch::Tensor contiguous_grad(const torch::Tensor& x);

/// Whether a block of this kind is checkpointed under `mode`: `blocks` takes the main units
/// (transformer blocks, UNet encoder stages, ResNet bottlenecks), `all` every unit.
inline bool checkpoints(CheckpointMode mode, bool main_unit) {
  return mode == CheckpointMode::kAll || (mode == CheckpointMode::kBlocks && main_unit);
}

/// Calls `fn(x)` through checkpoint() when `enabled`, the module is training and grad mode is on;
/// directly otherwise (no recomputation is needed without a backward pass).
torch::Tensor maybe_checkpoint(bool enabled, bool training,
                               const std::function<torch::Tensor(const torch::Tensor&)>& fn, const torch::Tensor& x);
/// x through `blocks` (module holders with forward(Tensor)) in order, as one maybe_checkpoint unit.
template <class Block>
torch::Tensor run_blocks(std::vector<Block> blocks, const torch::Tensor& x, bool enabled, bool training) {
  return maybe_checkpoint(
      enabled, training,
      [blocks = std::move(blocks)](const torch::Tensor& t) mutable {
        torch::Tensor y = t;
        for (auto& b : blocks) y = b->forward(y);
        return y;
      },
      x);
}
/// Multi-input form of maybe_checkpoint; returns fn's first output.
torch::Tensor maybe_checkpoint(bool enabled, bool training, const BlockFn& fn,
                               const std::vector<torch::Tensor>& inputs);

}  // namespace voxfit::models
