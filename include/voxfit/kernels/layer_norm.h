#pragma once
// Layer norm over the last dimension through the kernels dispatch: voxfit's CUDA kernels where
// they apply (a CUDA build, a CUDA tensor of float, half or bfloat16, `--kernels fused`), otherwise
// ATen's torch::layer_norm, which stays the reference and the only path on CPU and LibTorch 1.13
// builds.
#include <torch/types.h>

namespace voxfit::kernels {

/// layer_norm(x) * weight + bias over x's last dimension (biased variance, as torch::layer_norm).
/// weight / bias: [x.size(-1)] or undefined. The fused path returns x's dtype (contiguous) and keeps x as
/// given; ATen under autocast casts a half x to float32 first, keeps that cast and
/// returns float32. A following linear layer casts to half either way, so it sees the same values.
torch::Tensor layer_norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                         double eps = 1e-5);

/// torch::layer_norm over the last dimension: the reference path.
torch::Tensor layer_norm_reference(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                   double eps = 1e-5);

/// True where layer_norm runs the fused kernels for these arguments in the current mode.
bool fused_layer_norm_applies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

/// A pre-norm transformer's residual step: the new residual stream and its norm.
struct AddNorm {
  torch::Tensor sum;     ///< x + residual
  torch::Tensor normed;  ///< layer_norm(sum)
};

/// sum = x + residual and layer_norm(sum) (as layer_norm). Fused: one kernel reads x and residual
/// once and writes both (where fused_add_layer_norm_applies); otherwise the add, then layer_norm.
AddNorm add_layer_norm(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight,
                       const torch::Tensor& bias, double eps = 1e-5);

/// True where add_layer_norm runs the one fused kernel: the fused mode on a CUDA build, x and
/// residual contiguous CUDA tensors of one shape and dtype (float, half or bfloat16) whose rows
/// are a whole number of 16-byte vectors, 32 vectors to 1024 elements wide (ViT-B's 768).
bool fused_add_layer_norm_applies(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight,
                                  const torch::Tensor& bias);

}  // namespace voxfit::kernels
