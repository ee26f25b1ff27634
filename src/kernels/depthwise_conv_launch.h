#pragma once
// The launchers of voxfit's depthwise 3D convolution kernels (depthwise_conv.cu). Plain pointers and
// sizes only: the .cu file is compiled by nvcc without LibTorch's headers, and depthwise_conv_cuda.cpp
// turns tensors into these calls.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "instance_norm_launch.h"  // DType

namespace voxfit::kernels::cuda {

/// An NCDHW-contiguous volume batch.
struct VolumeShape {
  int64_t n = 0, c = 0, d = 0, h = 0, w = 0;
};

/// Whether the kernels below take this kernel size (3 or 5) and volume (grid limits).
bool depthwise3d_supported(const VolumeShape& shape, int kernel);

/// y[n, c] = x[n, c] correlated with w[c] (float32, [C, k, k, k]) + bias[c] (float32 or null), stride 1,
/// zero padding k / 2 (the output has the input's size). The gradient of x is this call on dy with
/// the weights flipped along every axis and no bias.
void depthwise3d_forward(DType dtype, const VolumeShape& shape, int kernel, const void* x, const float* w,
                         const float* bias, void* y, cudaStream_t stream);

/// Floats of scratch depthwise3d_backward_weight needs for `shape` (per-block partial sums).
int64_t depthwise3d_workspace_floats(const VolumeShape& shape, int kernel);

/// The weight and bias gradients of depthwise3d_forward: dw[c][t] = sum over n and the voxels of
/// dy x (x shifted by tap t), db[c] = sum of dy (db may be null); float32, overwritten. Partial sums
/// per block go to `workspace` and a second launch adds them in a fixed order: no atomics, so the
/// same input gives the same bits.
void depthwise3d_backward_weight(DType dtype, const VolumeShape& shape, int kernel, const void* x, const void* dy,
                                 float* dw, float* db, float* workspace, cudaStream_t stream);

}  // namespace voxfit::kernels::cuda
