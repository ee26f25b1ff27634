#pragma once
// The training losses and their registry. A loss is its function and one LossEntry {name, summary,
// factory, what it keeps for backward} beside it in losses.cpp, plus its test: the training step
// (through deep_supervision_loss), the step's memory prediction (train/step_memory.h) and the
// trainer's option check all read the registry. The one loss today is nnU-Net's DC_and_CE (soft
// Dice + cross-entropy); deep supervision applies the loss LossOptions names to every output.
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "voxfit/kernels/dice_ce.h"
#include "voxfit/memory/memory_tracker.h"

namespace voxfit::train {

/// Which registered loss a step trains with, and the settings the losses read.
struct LossOptions {
  std::string name = "dice_ce";  ///< a registered loss (find_loss)
  // dice_ce:
  double smooth = 1e-5;             ///< added to numerator and denominator of the soft Dice
  bool include_background = false;  ///< nnU-Net's do_bg: Dice over class 0 too
  bool batch_dice = false;          ///< one Dice per class over the whole batch instead of per sample
  double weight_ce = 1.0;           ///< weight of the cross-entropy term
  double weight_dice = 1.0;         ///< weight of the Dice term
};

/// A loss on one network output: logits [B, K, spatial...] (any float dtype) against the target
/// [B, 1, spatial...] (class indices); a float32 scalar.
using LossFunction = std::function<torch::Tensor(const torch::Tensor& logits, const torch::Tensor& target)>;

/// One registered loss.
struct LossEntry {
  std::string name;     ///< "dice_ce", as LossOptions::name
  std::string summary;  ///< one line
  std::function<LossFunction(const LossOptions&)> make;
  /// Bytes by dtype the loss keeps for backward on one output of shape [B, K, spatial...] (the
  /// logits themselves not counted), on voxfit's fused CUDA kernels when `fused`: its part of a
  /// step's predicted memory.
  std::function<memory::DtypeBytes(const std::vector<std::int64_t>& output_shape, bool fused)> saved_for_backward;
};

/// Every loss, in registration order.
const std::vector<LossEntry>& loss_registry();
/// The registered names, comma-separated ("dice_ce"), as an option's help text lists them.
std::string loss_names();
/// The entry of `name`; throws ConfigError naming the known losses.
const LossEntry& find_loss(const std::string& name);
/// The loss `o.name` names, with `o`'s settings; throws as find_loss.
LossFunction make_loss(const LossOptions& o);

/// Soft Dice (as a negative mean Dice, like nnU-Net) on softmax(logits) vs one-hot(target).
/// logits [B, K, spatial...] (any float dtype; computed in float32), target [B, 1, spatial...] int64.
torch::Tensor soft_dice_loss(const torch::Tensor& logits, const torch::Tensor& target, const LossOptions& o);

/// The dice_ce settings of `o`, as the fused kernels take them.
kernels::DiceCeSpec dice_ce_spec(const LossOptions& o);

/// CE + (-Dice), weighted; the value is in float32 whatever the logits' dtype. Registered as "dice_ce".
/// On the fused CUDA kernels where kernels::fused_dice_ce_applies, else the ATen reference.
torch::Tensor dice_ce_loss(const torch::Tensor& logits, const torch::Tensor& target, const LossOptions& o);

/// nnU-Net's deep-supervision weights for `n` outputs: 1/2^i, the lowest resolution off, normalised.
std::vector<double> deep_supervision_weights(std::size_t n);

/// Sum over outputs (full resolution first) of weight_i * loss(output_i, target resized to it by
/// nearest neighbour), the loss being make_loss(o). With one output this is that loss.
torch::Tensor deep_supervision_loss(const std::vector<torch::Tensor>& outputs, const torch::Tensor& target,
                                    const LossOptions& o);

}  // namespace voxfit::train
