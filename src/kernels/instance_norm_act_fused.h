#pragma once
// The CUDA side of kernels::instance_norm_act (instance_norm_act_cuda.cpp): CUDA builds only.
#include <torch/types.h>

#include "voxfit/kernels/instance_norm_act.h"

namespace voxfit::kernels {

/// x is a CUDA tensor of float / half / bfloat16 with more than one spatial element, contiguous
/// NCDHW or channels-last; a weight is on x's device; a residual has x's dtype, sizes and strides.
bool fused_instance_norm_supports(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& residual);

/// instance_norm_act on the fused kernels, with its own autograd node. What it keeps for backward:
/// without affine parameters or a ReLU the output, the residual if any (kept anyway by whatever
/// made it) and the per-instance statistics (the normalised input is recovered from the output
/// less the residual, as in-place activated batch norm does); otherwise the input too. Requires
/// fused_instance_norm_supports(x, residual).
torch::Tensor instance_norm_act_fused(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                      const torch::Tensor& residual, const NormActSpec& spec);

/// fused_instance_norm_supports (and, in NCDHW, at most 65535 samples): the batch's rows of each
/// channel are one instance of the kernels, in either layout.
bool fused_batch_norm_supports(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& residual);

struct BatchNormResult {
  torch::Tensor y;
  torch::Tensor mean, rstd;  ///< the batch's, per channel ([C], fp32, no gradient)
};
/// Batch norm's training step on the same kernels and autograd node (statistics over N x S rows of
/// each channel), keeping what instance_norm_act_fused keeps. Requires fused_batch_norm_supports.
BatchNormResult batch_norm_act_fused(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                     const torch::Tensor& residual, const NormActSpec& spec);

}  // namespace voxfit::kernels
