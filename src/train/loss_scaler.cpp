#include "voxfit/train/loss_scaler.h"

#include <torch/torch.h>

namespace voxfit::train {

LossScaler::LossScaler(LossScalerOptions options, torch::Device device)
    : options_(options), use_fused_ops_(device.is_cuda()) {
  const auto f = torch::TensorOptions().dtype(torch::kFloat).device(device);
  scale_ = torch::full({1}, options_.enabled ? options_.init_scale : 1.0, f);
  growth_tracker_ = torch::zeros({1}, f.dtype(torch::kInt));
  found_inf_ = torch::zeros({1}, f);
}

torch::Tensor LossScaler::scale_loss(const torch::Tensor& loss) const {
  if (!options_.enabled) return loss;
  return loss * scale_.to(loss.scalar_type());
}

void LossScaler::unscale(const std::vector<torch::Tensor>& grads) {
  found_inf_.zero_();
  if (!options_.enabled) return;
  torch::NoGradGuard no_grad;
  const auto inv_scale = scale_.reciprocal();
  if (use_fused_ops_) {
    std::vector<torch::Tensor> defined;
    for (const auto& g : grads)
      if (g.defined()) defined.push_back(g);
    at::_amp_foreach_non_finite_check_and_unscale_(defined, found_inf_, inv_scale);
    return;
  }
  for (const auto& g : grads) {
    if (!g.defined()) continue;
    g.mul_(inv_scale.to(g.scalar_type()));
    found_inf_.add_(g.isfinite().logical_not().any().to(torch::kFloat)).clamp_max_(1.0);
  }
}

bool LossScaler::found_inf() const { return found_inf_.item<float>() != 0.0f; }

void LossScaler::update() {
  if (!options_.enabled) return;
  torch::NoGradGuard no_grad;
  if (use_fused_ops_) {
    at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth, options_.backoff,
                           options_.growth_interval);
    return;
  }
  // The same rule as _amp_update_scale_'s kernel.
  if (found_inf_.item<float>() != 0.0f) {
    scale_.mul_(options_.backoff);
    growth_tracker_.zero_();
    return;
  }
  const int64_t successful = growth_tracker_.item<int>() + 1;
  if (successful == options_.growth_interval) {
    const double grown = scale_.item<float>() * options_.growth;
    if (std::isfinite(static_cast<float>(grown))) scale_.fill_(grown);
    growth_tracker_.zero_();
  } else {
    growth_tracker_.fill_(successful);
  }
}

double LossScaler::scale() const { return scale_.item<float>(); }
int64_t LossScaler::growth_tracker() const { return growth_tracker_.item<int>(); }

void LossScaler::load_state(const std::vector<torch::Tensor>& s) {
  TORCH_CHECK(s.size() == 2, "loss scaler state: expected 2 tensors, got ", s.size());
  torch::NoGradGuard no_grad;
  scale_.copy_(s[0]);
  growth_tracker_.copy_(s[1]);
}

}  // namespace voxfit::train
