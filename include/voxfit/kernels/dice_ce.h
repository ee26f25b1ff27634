#pragma once
// nnU-Net's DC_and_CE loss (cross-entropy + soft Dice on the softmax) on voxfit's fused CUDA kernels
// (src/kernels/dice_ce.cu), where they apply: a CUDA build, CUDA logits of float, half or bfloat16,
// NCDHW or channels-last, at most 32 classes, `--kernels fused`. train::dice_ce_loss dispatches
// here; its ATen composition stays the reference and the only path elsewhere.
//
// The loss follows from per-sample sums (dice_ce_loss_from_sums), and its gradient at the softmax
// from per-sample coefficients (dice_ce_coefficients): both plain ATen on B x (3K + 1) numbers,
// shared by the kernels and by the CPU tests that check them against autograd of the reference.
#include <torch/types.h>

namespace voxfit::kernels {

/// The loss's settings (train::LossOptions' dice_ce fields).
struct DiceCeSpec {
  double smooth = 1e-5;
  bool include_background = false;
  bool batch_dice = false;
  double weight_ce = 1.0;
  double weight_dice = 1.0;
};

/// sums [B, 3K + 1] float32, per sample: for each class k sum(p_k [t = k]), sum(p_k) and
/// sum([t = k]) over its `voxels` voxels, then sum(-log p_t). The loss: weight_ce * the mean
/// cross-entropy over all voxels - weight_dice * the mean soft Dice (2I + smooth) / max(T + P + smooth,
/// 1e-8) over the samples (one over the batch with batch_dice) and the classes (class 0 only with
/// include_background). A float32 scalar.
torch::Tensor dice_ce_loss_from_sums(const torch::Tensor& sums, const DiceCeSpec& spec, int64_t voxels);

/// The loss's gradient, times `grad` (a scalar tensor), as coefficients [B, 2K + 1] float32: a_k,
/// c_k with dL/dp_k = a_k [t = k] + c_k at a voxel of label t, then e with dL/dz from the
/// cross-entropy e (p - onehot(t)).
torch::Tensor dice_ce_coefficients(const torch::Tensor& sums, const DiceCeSpec& spec, int64_t voxels,
                                   const torch::Tensor& grad);

/// Whether dice_ce_fused runs for these logits [B, K, spatial...] and target [B, 1, spatial...].
bool fused_dice_ce_applies(const torch::Tensor& logits, const torch::Tensor& target);

/// The loss on the fused kernels, with its own autograd node: it keeps the logits and the target
/// (which exist anyway) and B x (3K + 1) sums. Requires fused_dice_ce_applies. The target's labels
/// must lie in [0, K) (voxfit's prepared data guarantee it): one outside counts for no class.
torch::Tensor dice_ce_fused(const torch::Tensor& logits, const torch::Tensor& target, const DiceCeSpec& spec);

}  // namespace voxfit::kernels
