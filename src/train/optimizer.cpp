#include "voxfit/train/optimizer.h"

#include <torch/torch.h>

#include "voxfit/core/error.h"
#include "voxfit/core/torch_compat.h"
#include "voxfit/models/network.h"

namespace voxfit::train {

OptimizerOptions OptimizerOptions::defaults_for(OptimizerKind kind) {
  OptimizerOptions o;
  o.kind = kind;
  if (kind == OptimizerKind::kSgd) {
    o.lr = 1e-2;
    o.weight_decay = 3e-5;
    o.clip_grad_norm = 12.0;
  }
  return o;
}

OptimizerKind default_optimizer(const std::string& model) {
  return parse_optimizer(models::find_model(model).recipe.optimizer);
}

ScheduleKind default_schedule(OptimizerKind kind) {
  return kind == OptimizerKind::kSgd ? ScheduleKind::kPoly : ScheduleKind::kConstant;
}

OptimizerKind parse_optimizer(const std::string& text) {
  if (text == "adamw") return OptimizerKind::kAdamW;
  if (text == "sgd") return OptimizerKind::kSgd;
  throw ConfigError("--optimizer: '" + text + "' is not one of adamw, sgd");
}

std::string to_string(OptimizerKind k) { return k == OptimizerKind::kAdamW ? "adamw" : "sgd"; }

Optimizer::Optimizer(std::vector<torch::Tensor> params, OptimizerOptions options)
    : params_(std::move(params)), options_(options) {
  TORCH_CHECK(!params_.empty(), "optimizer: no parameters");
  const auto device = params_.front().device();
  step_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device));
  fused_ = options_.fused && device.is_cuda() &&
           (options_.kind == OptimizerKind::kAdamW ? compat::kHasFusedAdamW : compat::kHasFusedSgd);
  torch::NoGradGuard no_grad;
  for (const auto& p : params_) {
    if (options_.kind == OptimizerKind::kAdamW) {
      exp_avg_.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      exp_avg_sq_.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    } else {
      momentum_.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    }
  }
}

std::vector<torch::Tensor> Optimizer::gradients() const {
  std::vector<torch::Tensor> g;
  g.reserve(params_.size());
  for (const auto& p : params_) g.push_back(p.grad());
  return g;
}

void Optimizer::zero_grad() {
  // Dropping the gradients (set_to_none) frees their memory between steps, as PyTorch 2.x does.
  for (auto& p : params_) p.mutable_grad() = torch::Tensor();
}

int64_t Optimizer::state_bytes() const {
  int64_t n = 0;
  for (const auto* v : {&exp_avg_, &exp_avg_sq_, &momentum_})
    for (const auto& t : *v) n += t.numel() * static_cast<int64_t>(t.element_size());
  return n;
}

void Optimizer::clip_gradients() {
  if (options_.clip_grad_norm <= 0) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params_)
    if (p.grad().defined()) grads.push_back(p.grad());
  compat::clip_joint_norm_(grads, options_.clip_grad_norm);
}

void Optimizer::step(double lr, const torch::Tensor& found_inf) {
  torch::NoGradGuard no_grad;
  if (options_.kind == OptimizerKind::kAdamW)
    adamw_step(lr, found_inf);
  else
    sgd_step(lr, found_inf);
}

void Optimizer::step(const torch::Tensor& lr, const torch::Tensor& found_inf) {
  TORCH_CHECK(capturable(),
              "optimizer: a device learning rate needs the fused optimiser (AdamW: LibTorch >= 2.2, SGD: >= 2.4)");
  torch::NoGradGuard no_grad;
  if (options_.kind == OptimizerKind::kAdamW)
    fused_adamw_step(0.0, &lr, found_inf);
  else
    fused_sgd_step(lr, found_inf);
}

bool Optimizer::capturable() const {
  return fused_ && (options_.kind == OptimizerKind::kSgd || compat::kFusedAdamwTensorLr);
}

void Optimizer::count_step(const torch::Tensor& found_inf) {
  // One shared step counter, advanced only when the step is not skipped (no host sync).
  if (found_inf.defined())
    step_.add_(1.0 - found_inf.squeeze());
  else
    step_.add_(1.0);
}

template <typename Lr>
void Optimizer::fused_sgd_step(const Lr& lr, const torch::Tensor& found_inf) {
  const auto& o = options_;
  count_step(found_inf);
  std::vector<torch::Tensor> grads, params, buffers;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].grad().defined()) continue;
    params.push_back(params_[i]);
    grads.push_back(params_[i].grad());
    buffers.push_back(momentum_[i]);
  }
  c10::optional<at::Tensor> inf;
  if (found_inf.defined()) inf = found_inf;
  compat::fused_sgd(params, grads, buffers, lr, o.momentum, o.weight_decay, /*nesterov=*/true, inf);
}

void Optimizer::fused_adamw_step(double lr, const torch::Tensor* lr_tensor, const torch::Tensor& found_inf) {
  const auto& o = options_;
  count_step(found_inf);
  std::vector<torch::Tensor> grads, params, m, v, steps;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].grad().defined()) continue;
    params.push_back(params_[i]);
    grads.push_back(params_[i].grad());
    m.push_back(exp_avg_[i]);
    v.push_back(exp_avg_sq_[i]);
    steps.push_back(step_);
  }
  c10::optional<at::Tensor> inf;
  if (found_inf.defined()) inf = found_inf;
  if (lr_tensor)
    compat::fused_adamw(params, grads, m, v, steps, *lr_tensor, o.beta1, o.beta2, o.weight_decay, o.eps, inf);
  else
    compat::fused_adamw(params, grads, m, v, steps, lr, o.beta1, o.beta2, o.weight_decay, o.eps, inf);
}

void Optimizer::adamw_step(double lr, const torch::Tensor& found_inf) {
  const auto& o = options_;
  if (fused_) {
    fused_adamw_step(lr, nullptr, found_inf);
    return;
  }
  if (found_inf.defined() && found_inf.item<float>() != 0.0f) return;
  step_.add_(1.0);
  const double t = step_.item<float>();
  const double bc1 = 1.0 - std::pow(o.beta1, t);
  const double bc2 = 1.0 - std::pow(o.beta2, t);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    if (!p.grad().defined()) continue;
    const auto g = p.grad();
    p.mul_(1.0 - lr * o.weight_decay);
    exp_avg_[i].mul_(o.beta1).add_(g, 1.0 - o.beta1);
    exp_avg_sq_[i].mul_(o.beta2).addcmul_(g, g, 1.0 - o.beta2);
    const auto denom = (exp_avg_sq_[i].sqrt() / std::sqrt(bc2)).add_(o.eps);
    p.addcdiv_(exp_avg_[i], denom, -lr / bc1);
  }
}

void Optimizer::sgd_step(double lr, const torch::Tensor& found_inf) {
  if (fused_) {
    fused_sgd_step(lr, found_inf);
    return;
  }
  if (found_inf.defined() && found_inf.item<float>() != 0.0f) return;
  const auto& o = options_;
  const bool first = step_.item<float>() == 0.0f;
  step_.add_(1.0);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    if (!p.grad().defined()) continue;
    auto g = p.grad();
    if (o.weight_decay != 0) g = g.add(p, o.weight_decay);
    // PyTorch's SGD: the buffer starts as the first gradient, then buf = m*buf + g.
    if (first)
      momentum_[i].copy_(g);
    else
      momentum_[i].mul_(o.momentum).add_(g);
    p.add_(g.add(momentum_[i], o.momentum), -lr);  // Nesterov: g + m*buf
  }
}

std::vector<std::pair<std::string, torch::Tensor>> Optimizer::state() const {
  std::vector<std::pair<std::string, torch::Tensor>> s{{"step", step_}};
  for (std::size_t i = 0; i < exp_avg_.size(); ++i) {
    s.emplace_back("exp_avg." + std::to_string(i), exp_avg_[i]);
    s.emplace_back("exp_avg_sq." + std::to_string(i), exp_avg_sq_[i]);
  }
  for (std::size_t i = 0; i < momentum_.size(); ++i) s.emplace_back("momentum." + std::to_string(i), momentum_[i]);
  return s;
}

void Optimizer::load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  auto mine = this->state();
  if (mine.size() != state.size())
    throw Error("optimizer state: expected " + std::to_string(mine.size()) + " tensors, found " +
                std::to_string(state.size()) + " (a checkpoint of another model or optimiser?)");
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < mine.size(); ++i) {
    if (mine[i].first != state[i].first || mine[i].second.sizes() != state[i].second.sizes())
      throw Error("optimizer state: '" + state[i].first + "' does not match '" + mine[i].first + "'");
    mine[i].second.copy_(state[i].second);
  }
}

}  // namespace voxfit::train
