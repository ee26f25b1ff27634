#include "voxfit/kernels/layer_norm.h"

#include <torch/torch.h>

#include "voxfit/kernels/instance_norm_act.h"  // kernel_mode

#ifdef VOXFIT_WITH_CUDA
#include "layer_norm_fused.h"
#endif

namespace voxfit::kernels {

torch::Tensor layer_norm_reference(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                   double eps) {
  return torch::layer_norm(x, {x.size(-1)}, weight, bias, eps);
}

bool fused_layer_norm_applies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
#ifdef VOXFIT_WITH_CUDA
  return kernel_mode() == KernelMode::kFused && fused_layer_norm_supports(x, weight, bias);
#else
  (void)x;
  (void)weight;
  (void)bias;
  return false;
#endif
}

bool fused_add_layer_norm_applies(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight,
                                  const torch::Tensor& bias) {
#ifdef VOXFIT_WITH_CUDA
  return kernel_mode() == KernelMode::kFused && fused_add_layer_norm_supports(x, residual, weight, bias);
#else
  (void)x;
  (void)residual;
  (void)weight;
  (void)bias;
  return false;
#endif
}

AddNorm add_layer_norm(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight,
                       const torch::Tensor& bias, double eps) {
#ifdef VOXFIT_WITH_CUDA
  if (fused_add_layer_norm_applies(x, residual, weight, bias)) return add_layer_norm_fused(x, residual, weight, bias, eps);
#endif
  auto sum = x + residual;
  auto normed = layer_norm(sum, weight, bias, eps);
  return {std::move(sum), std::move(normed)};
}

torch::Tensor layer_norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, double eps) {
#ifdef VOXFIT_WITH_CUDA
  if (fused_layer_norm_applies(x, weight, bias)) return layer_norm_fused(x, weight, bias, eps);
#endif
  return layer_norm_reference(x, weight, bias, eps);
}

}  // namespace voxfit::kernels
