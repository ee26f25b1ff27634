#pragma once
// CUDA builds only: cuDNN's fused convolution + bias (+ add) + ReLU (conv_bias_act_cuda.cpp).
#include <torch/types.h>

namespace voxfit::kernels {

torch::Tensor conv2d_bias_relu_cudnn(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                     const torch::Tensor& residual, int64_t stride, int64_t padding);

}  // namespace voxfit::kernels
