#pragma once
// The CUDA side of kernels::layer_norm (layer_norm_cuda.cpp): CUDA builds only.
#include <torch/types.h>

#include "voxfit/kernels/layer_norm.h"  // AddNorm

namespace voxfit::kernels {

/// x is a non-empty CUDA tensor of float / half / bfloat16 (any strides: it is made contiguous);
/// a weight or bias has x.size(-1) elements on x's device.
bool fused_layer_norm_supports(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

/// fused_layer_norm_supports(x, weight, bias), and the residual is x's shape, dtype and device,
/// both contiguous, with rows the 16-byte-load kernel takes (32 vectors to 1024 elements).
bool fused_add_layer_norm_supports(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight,
                                   const torch::Tensor& bias);

/// add_layer_norm on the fused kernel, with its own autograd node (it keeps the sum and two floats
/// a row). Requires fused_add_layer_norm_supports.
AddNorm add_layer_norm_fused(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight,
                             const torch::Tensor& bias, double eps);

/// layer_norm on the fused kernels, with its own autograd node. It keeps x as given (in its own
/// dtype and strides) and two floats a row. Requires fused_layer_norm_supports.
torch::Tensor layer_norm_fused(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                               double eps);

}  // namespace voxfit::kernels
