#include "voxfit/kernels/instance_norm_act.h"

#include <torch/torch.h>

#include <algorithm>
#include <atomic>

#include "voxfit/core/error.h"

#ifdef VOXFIT_WITH_CUDA
#include "instance_norm_act_fused.h"
#endif

namespace voxfit::kernels {

namespace {
// The fused kernels become the default once their tests and the training-curve comparison have
// passed on a GPU (issue 26); until then they are opt-in.
std::atomic<KernelMode> g_mode{KernelMode::kFused};
}  // namespace

KernelMode parse_kernel_mode(const std::string& text, const std::string& what) {
  if (text == "aten") return KernelMode::kAten;
  if (text == "fused") return KernelMode::kFused;
  throw ConfigError(what + ": expected aten or fused, got '" + text + "'");
}

std::string to_string(KernelMode mode) { return mode == KernelMode::kAten ? "aten" : "fused"; }

KernelMode kernel_mode() { return g_mode.load(); }
void set_kernel_mode(KernelMode mode) { g_mode.store(mode); }

namespace {
torch::Tensor add_and_activate(torch::Tensor y, const torch::Tensor& residual, const NormActSpec& spec) {
  if (residual.defined()) y = y + residual;
  if (spec.act == Activation::kLeakyReLU) return torch::leaky_relu_(y, spec.slope);
  if (spec.act == Activation::kReLU) return torch::relu_(y);
  return y;
}
}  // namespace

torch::Tensor instance_norm_act_reference(const torch::Tensor& x, const torch::Tensor& weight,
                                          const torch::Tensor& bias, const torch::Tensor& residual,
                                          const NormActSpec& spec) {
  // What torch::nn::InstanceNorm3d runs (no running statistics), then the add and the activation
  // in place, as the conv blocks did before the fused path existed.
  return add_and_activate(torch::instance_norm(x, weight, bias, {}, {}, /*use_input_stats=*/true, /*momentum=*/0.1,
                                               spec.eps, at::globalContext().userEnabledCuDNN()),
                          residual, spec);
}

bool fused_instance_norm_applies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& residual) {
#ifdef VOXFIT_WITH_CUDA
  return kernel_mode() == KernelMode::kFused && fused_instance_norm_supports(x, weight, residual);
#else
  (void)x;
  (void)weight;
  (void)residual;
  return false;
#endif
}

torch::Tensor batch_norm_act_reference(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                       const RunningStats& running, bool training, const torch::Tensor& residual,
                                       const NormActSpec& spec) {
  // What torch::nn::BatchNorm3d runs, then the add and the activation in place.
  return add_and_activate(
      torch::batch_norm(x, weight, bias, running.mean, running.var, training || !running.mean.defined(),
                        running.momentum, spec.eps, at::globalContext().userEnabledCuDNN()),
      residual, spec);
}

void update_running_stats(const RunningStats& running, const torch::Tensor& mean, const torch::Tensor& rstd,
                          int64_t rows, double eps) {
  if (!running.mean.defined()) return;
  // As ATen's batch norm: m x the batch's mean and unbiased variance + (1 - m) x the running ones.
  torch::NoGradGuard no_grad;
  const double n = static_cast<double>(rows);
  const auto var = (rstd.square().reciprocal() - eps) * (n / std::max(n - 1, 1.0));
  running.mean.mul_(1 - running.momentum).add_(mean.to(running.mean.scalar_type()), running.momentum);
  running.var.mul_(1 - running.momentum).add_(var.to(running.var.scalar_type()), running.momentum);
}

bool fused_batch_norm_applies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& residual,
                              const RunningStats& running, bool training) {
#ifdef VOXFIT_WITH_CUDA
  return (training || !running.mean.defined()) && kernel_mode() == KernelMode::kFused &&
         fused_batch_norm_supports(x, weight, residual);
#else
  (void)x;
  (void)weight;
  (void)residual;
  (void)running;
  (void)training;
  return false;
#endif
}

torch::Tensor batch_norm_act(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                             const RunningStats& running, bool training, const torch::Tensor& residual,
                             const NormActSpec& spec) {
#ifdef VOXFIT_WITH_CUDA
  if (fused_batch_norm_applies(x, weight, residual, running, training)) {
    const auto r = batch_norm_act_fused(x, weight, bias, residual, spec);
    update_running_stats(running, r.mean, r.rstd, x.numel() / x.size(1), spec.eps);
    return r.y;
  }
#endif
  return batch_norm_act_reference(x, weight, bias, running, training, residual, spec);
}

torch::Tensor instance_norm_act(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                const torch::Tensor& residual, const NormActSpec& spec) {
#ifdef VOXFIT_WITH_CUDA
  if (fused_instance_norm_applies(x, weight, residual)) return instance_norm_act_fused(x, weight, bias, residual, spec);
#endif
  return instance_norm_act_reference(x, weight, bias, residual, spec);
}

}  // namespace voxfit::kernels
