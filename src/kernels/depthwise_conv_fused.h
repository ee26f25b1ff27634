#pragma once
// The CUDA side of kernels::depthwise_conv3d (depthwise_conv_cuda.cpp): CUDA builds only.
#include <torch/types.h>

namespace voxfit::kernels {

/// x is an NCDHW-contiguous CUDA tensor of float / half / bfloat16 (after autocast's cast), weight
/// [C, 1, k, k, k] on its device with k 3 or 5, and the volume within the kernels' grid limits.
bool fused_depthwise_conv3d_supports(const torch::Tensor& x, const torch::Tensor& weight);

/// depthwise_conv3d on voxfit's kernels, with its own autograd node; keeps x for the weight gradient
/// (as ATen's convolution does). Requires fused_depthwise_conv3d_supports.
torch::Tensor depthwise_conv3d_fused(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

}  // namespace voxfit::kernels
