#pragma once
// The launchers of voxfit's layer-norm kernels (layer_norm.cu): plain pointers and sizes, as
// instance_norm_launch.h; layer_norm_cuda.cpp turns tensors into these calls.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "instance_norm_launch.h"  // DType

namespace voxfit::kernels::cuda {

/// `rows` contiguous rows of `width` elements.
struct RowShape {
  int64_t rows = 0, width = 0;
};

/// Rows of the per-warp column partials that layer_norm_backward writes (see there).
int64_t layer_norm_partial_rows(const RowShape& shape);

/// y = (x - mean) * rstd * weight + bias per row, in x's dtype; mean and rstd ([rows], fp32) from
/// float32 sums. weight / bias (fp32, [width]) may be null (1 and 0).
void layer_norm_forward(DType dtype, const RowShape& shape, const void* x, const float* weight, const float* bias,
                        float eps, void* y, float* mean, float* rstd, cudaStream_t stream);

/// sum = x + residual (rounded to x's dtype, as an add in that dtype) and y = layer_norm(sum) as
/// layer_norm_forward, in one pass. Only for rows the 16-byte-load kernel takes (32 vectors to 1024
/// elements, a whole number of vectors, every pointer 16-byte aligned): false, and nothing
/// launched, for any other.
bool add_layer_norm_forward(DType dtype, const RowShape& shape, const void* x, const void* residual,
                            const float* weight, const float* bias, float eps, void* sum, void* y, float* mean,
                            float* rstd, cudaStream_t stream);

/// dx of layer_norm_forward in x's dtype, and column partials for the parameters' gradients:
/// partial_dw / partial_db ([layer_norm_partial_rows, width], fp32; may be null when there are no
/// parameters) receive, per warp of the launch, the sums over its rows of dy * xhat and dy. Adding
/// the partial rows up (in a fixed order) gives dweight and dbias.
void layer_norm_backward(DType dtype, const RowShape& shape, const void* dy, const void* x, const float* mean,
                         const float* rstd, const float* weight, void* dx, float* partial_dw, float* partial_db,
                         cudaStream_t stream);

}  // namespace voxfit::kernels::cuda
