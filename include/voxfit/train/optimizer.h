#pragma once
// The two optimisers voxfit trains with, written against plain tensors so that their state is easy
// to checkpoint and the CUDA path can use LibTorch 2.x's fused AdamW and SGD kernels.
#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "voxfit/core/torch_compat.h"
#include "voxfit/train/lr_schedule.h"

namespace voxfit::train {

enum class OptimizerKind { kAdamW, kSgd };

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double lr = 1e-4;                               ///< peak learning rate (AdamW 1e-4, SGD 1e-2 by default)
  double weight_decay = 1e-5;                     ///< decoupled for AdamW (3e-5 for SGD, L2 as PyTorch's SGD)
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  ///< AdamW
  double momentum = 0.99;                         ///< SGD, Nesterov
  double clip_grad_norm = 0.0;                    ///< 0: off (default for AdamW; 12 for SGD as nnU-Net)
  bool fused = true;  ///< use LibTorch's fused AdamW / SGD kernel where it has one (2.x, CUDA)

  /// The defaults of nnU-Net (SGD) or of the transformer papers (AdamW) for a kind.
  static OptimizerOptions defaults_for(OptimizerKind kind);
};

OptimizerKind parse_optimizer(const std::string& text);
/// The optimiser a network trains with unless told otherwise: its registry entry's recipe
/// (models::TrainingRecipe; SGD for unet3d as nnU-Net, AdamW for the transformers as their papers).
OptimizerKind default_optimizer(const std::string& model);
/// The schedule an optimiser trains with unless told otherwise: poly for SGD (nnU-Net's), constant
/// for AdamW (MONAI's UNETR / SwinUNETR tutorials; on the real CT, UNETR reached mean Dice 0.338
/// at 2,000 steps with it against 0.131 with poly: docs/performance-notes.md, note 36).
ScheduleKind default_schedule(OptimizerKind kind);
std::string to_string(OptimizerKind k);

class Optimizer {
 public:
  Optimizer(std::vector<torch::Tensor> params, OptimizerOptions options);

  /// One update with learning rate `lr`. `found_inf` (a [1] float tensor on the parameters' device,
  /// or undefined) skips the update where it is non-zero without a host sync on the fused path.
  void step(double lr, const torch::Tensor& found_inf = {});
  /// The same update with `lr` read from a [] float32 tensor on the parameters' device when the
  /// step runs, so that a CUDA graph that captured it follows the schedule. capturable() only.
  void step(const torch::Tensor& lr, const torch::Tensor& found_inf);
  /// True where the whole update runs on the device without a host value or sync (the fused
  /// AdamW or SGD of a LibTorch whose kernel takes a tensor learning rate): what a CUDA graph can
  /// capture.
  bool capturable() const;
  void zero_grad();
  /// Scales gradients so that their global L2 norm is at most clip_grad_norm (no host sync).
  void clip_gradients();

  std::vector<torch::Tensor> gradients() const;
  const OptimizerOptions& options() const { return options_; }
  bool fused() const { return fused_; }
  /// Bytes held by the optimiser state (moments / momentum buffers).
  int64_t state_bytes() const;

  /// Named state for checkpoints: "step", "exp_avg.<i>", "exp_avg_sq.<i>", "momentum.<i>".
  std::vector<std::pair<std::string, torch::Tensor>> state() const;
  /// Loads what state() returned (same parameter list); throws voxfit::Error on mismatch.
  void load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state);

 private:
  void adamw_step(double lr, const torch::Tensor& found_inf);
  void fused_adamw_step(double lr, const torch::Tensor* lr_tensor, const torch::Tensor& found_inf);
  void sgd_step(double lr, const torch::Tensor& found_inf);
  /// lr: a double or a [] float32 tensor on the device (compat::fused_sgd).
  template <typename Lr>
  void fused_sgd_step(const Lr& lr, const torch::Tensor& found_inf);
  void count_step(const torch::Tensor& found_inf);

  std::vector<torch::Tensor> params_;
  OptimizerOptions options_;
  bool fused_ = false;
  torch::Tensor step_;  // float32 [] on the parameters' device
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_, momentum_;
};

}  // namespace voxfit::train
