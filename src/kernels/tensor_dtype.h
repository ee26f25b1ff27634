#pragma once
// The kernels' element type of a LibTorch tensor (float, half or bfloat16), for the *_cuda.cpp files.
#include <torch/types.h>

#include "instance_norm_launch.h"

namespace voxfit::kernels {

inline cuda::DType dtype_of(const torch::Tensor& t) {
  if (t.scalar_type() == torch::kHalf) return cuda::DType::kHalf;
  if (t.scalar_type() == torch::kBFloat16) return cuda::DType::kBFloat16;
  return cuda::DType::kFloat;
}

}  // namespace voxfit::kernels
