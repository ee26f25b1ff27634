#pragma once
// The launchers of voxfit's fused instance-norm kernels (instance_norm.cu). Plain pointers and
// sizes only: the .cu file is compiled by nvcc without LibTorch's headers, and
// instance_norm_act_cuda.cpp turns tensors into these calls.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "instance_norm_types.h"

namespace voxfit::kernels::cuda {

/// Floats of scratch the launchers below need for `shape` (per-block partial sums).
int64_t workspace_floats(const NormShape& shape);

/// y = act((x - mean) * rstd * weight + bias + residual); writes mean and rstd ([N*C], fp32).
/// weight / bias (fp32, [C]) and residual (same dtype and layout as x) may be null.
void instance_norm_act_forward(DType dtype, const NormShape& shape, const void* x, const float* weight,
                               const float* bias, const void* residual, ActSpec act, float eps, void* y, float* mean,
                               float* rstd, float* workspace, cudaStream_t stream);

/// The gradient of instance_norm_act_forward. The normalised input comes from `x` (with mean and
/// rstd) or, when x is null, from the output y less `residual` (when not null): no affine
/// parameters, an invertible activation (none or LeakyReLU). The activation's derivative always
/// comes from y.
/// Writes dx, and dz (the gradient at the residual add) when dz is not null; sum_dz and
/// sum_dz_xhat ([N*C], fp32) receive the per-instance sums that give dbias and dweight.
void instance_norm_act_backward(DType dtype, const NormShape& shape, const void* dy, const void* y, const void* x,
                                const void* residual, const float* mean, const float* rstd, const float* weight,
                                ActSpec act, void* dx, void* dz, float* sum_dz, float* sum_dz_xhat, float* workspace,
                                cudaStream_t stream);

}  // namespace voxfit::kernels::cuda
