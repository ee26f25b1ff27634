#pragma once
// Depthwise 3D convolution (a k^3 filter per channel, stride 1, zero padding k / 2), as MedNeXt's
// blocks open with, through one dispatch: voxfit's CUDA kernels where they apply (a CUDA build, an
// NCDHW-contiguous CUDA tensor of float, half or bfloat16, k 3 or 5, `--kernels fused`), otherwise
// torch::conv3d with groups = channels, which stays the reference and the only path on the CPU.
#include <torch/types.h>

namespace voxfit::kernels {

/// torch::conv3d(x, weight, bias, stride 1, padding k / 2, groups C): weight [C, 1, k, k, k],
/// bias [C] or undefined. Under CUDA autocast x is cast to the autocast dtype (as conv3d's autocast
/// rule does); the weights are read in float32 and their gradients stay float32. Autograd flows to
/// x, weight and bias.
torch::Tensor depthwise_conv3d(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

/// The reference: torch::conv3d with groups = channels.
torch::Tensor depthwise_conv3d_reference(const torch::Tensor& x, const torch::Tensor& weight,
                                         const torch::Tensor& bias);

/// True where depthwise_conv3d runs voxfit's kernels for these arguments in the current mode.
bool fused_depthwise_conv3d_applies(const torch::Tensor& x, const torch::Tensor& weight);

}  // namespace voxfit::kernels
