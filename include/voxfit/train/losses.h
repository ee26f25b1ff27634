#pragma once
// nnU-Net's DC_and_CE loss (soft Dice + cross-entropy) with deep supervision.
#include <torch/types.h>

#include <vector>

namespace voxfit::train {

struct DiceCeOptions {
  double smooth = 1e-5;             ///< added to numerator and denominator of the soft Dice
  bool include_background = false;  ///< nnU-Net's do_bg: Dice over class 0 too
  bool batch_dice = false;          ///< one Dice per class over the whole batch instead of per sample
  double weight_ce = 1.0;           ///< weight of the cross-entropy term
  double weight_dice = 1.0;         ///< weight of the Dice term
};

/// Soft Dice (as a negative mean Dice, like nnU-Net) on softmax(logits) vs one-hot(target).
/// logits [B, K, spatial...] (any float dtype; computed in float32), target [B, 1, spatial...] int64.
torch::Tensor soft_dice_loss(const torch::Tensor& logits, const torch::Tensor& target, const DiceCeOptions& o);

/// CE + (-Dice), weighted; the value is in float32 whatever the logits' dtype.
torch::Tensor dice_ce_loss(const torch::Tensor& logits, const torch::Tensor& target, const DiceCeOptions& o);

/// nnU-Net's deep-supervision weights for `n` outputs: 1/2^i, the lowest resolution off, normalised.
std::vector<double> deep_supervision_weights(std::size_t n);

/// Sum over outputs (full resolution first) of weight_i * dice_ce(output_i, target resized to it by
/// nearest neighbour). With one output this is dice_ce_loss.
torch::Tensor deep_supervision_loss(const std::vector<torch::Tensor>& outputs, const torch::Tensor& target,
                                    const DiceCeOptions& o);

}  // namespace voxfit::train
