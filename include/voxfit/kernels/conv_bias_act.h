#pragma once
// Convolution + bias (+ a residual added) (+ ReLU) for inference through one dispatch: cuDNN's
// fused convolution kernels (one pass over the output instead of three) where they apply (a CUDA
// build, CUDA tensors, `--kernels fused`, cuDNN enabled, a ReLU at the end), otherwise ATen's
// conv2d, add and relu, which stay the reference.
#include <torch/types.h>

namespace voxfit::kernels {

/// relu?(conv2d(x, weight, bias, stride, padding) + residual). bias: [out] or undefined;
/// residual: undefined or the output's shape. No autograd through the fused path: inference only.
torch::Tensor conv2d_bias_act(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                              const torch::Tensor& residual, int64_t stride, int64_t padding, bool relu);

/// The ATen composition (the reference path).
torch::Tensor conv2d_bias_act_reference(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                        const torch::Tensor& residual, int64_t stride, int64_t padding, bool relu);

}  // namespace voxfit::kernels
