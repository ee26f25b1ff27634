#pragma once
// Dynamic loss scaling for float16 training, with PyTorch GradScaler's rules: multiply the loss by
// `scale`; before the optimiser step, unscale the gradients and check them for inf/NaN; skip the
// step if any is found and multiply the scale by `backoff`; after `growth_interval` clean steps in a
// row, multiply it by `growth`.
#include <torch/types.h>

#include <vector>

namespace voxfit::train {

struct LossScalerOptions {
  double init_scale = 65536.0;  ///< 2^16, as GradScaler
  double growth = 2.0;          ///< factor after growth_interval clean steps
  double backoff = 0.5;         ///< factor after a step with inf/NaN gradients
  int64_t growth_interval = 2000;
  bool enabled = true;  ///< false: scale 1, never skips (fp32/tf32/bf16)
};

class LossScaler {
 public:
  /// `device`: where the scale lives. On CUDA the fused ATen ops do the work
  /// (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_); elsewhere (LibTorch 1.13 has
  /// no CPU kernels for them) the same rules run as plain tensor math.
  LossScaler(LossScalerOptions options, torch::Device device);

  torch::Tensor scale_loss(const torch::Tensor& loss) const;
  /// Divides the gradients by the scale in place and records whether any was inf/NaN.
  /// Call once per step, before clipping and the optimiser step.
  void unscale(const std::vector<torch::Tensor>& grads);
  /// True when the last unscale found inf/NaN (one host sync; the step loop calls this once).
  bool found_inf() const;
  /// The found-inf flag as a device tensor (for fused optimisers; no sync).
  const torch::Tensor& found_inf_tensor() const { return found_inf_; }
  /// Grows or backs off the scale; call after the (possibly skipped) optimiser step.
  void update();

  double scale() const;
  int64_t growth_tracker() const;
  bool enabled() const { return options_.enabled; }

  /// For checkpoints: {scale, growth_tracker} tensors.
  std::vector<torch::Tensor> state() const { return {scale_, growth_tracker_}; }
  void load_state(const std::vector<torch::Tensor>& s);

 private:
  LossScalerOptions options_;
  bool use_fused_ops_;
  torch::Tensor scale_;           // float32 [1]
  torch::Tensor growth_tracker_;  // int32 [1]
  torch::Tensor found_inf_;       // float32 [1]
};

}  // namespace voxfit::train
