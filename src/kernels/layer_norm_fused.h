#pragma once
// The CUDA side of kernels::layer_norm (layer_norm_cuda.cpp): CUDA builds only.
#include <torch/types.h>

namespace voxfit::kernels {

/// x is a non-empty CUDA tensor of float / half / bfloat16 (any strides: it is made contiguous);
/// a weight or bias has x.size(-1) elements on x's device.
bool fused_layer_norm_supports(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

/// layer_norm on the fused kernels, with its own autograd node. It keeps x as given (in its own
/// dtype and strides) and two floats a row. Requires fused_layer_norm_supports.
torch::Tensor layer_norm_fused(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                               double eps);

}  // namespace voxfit::kernels
