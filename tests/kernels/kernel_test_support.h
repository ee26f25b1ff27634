#pragma once
// What the fused-kernel tests share: whether a GPU is here, and the comparison with a float64
// reference (tolerances relative to the reference's largest magnitude).
#include <torch/torch.h>

namespace voxfit::kernels::test {

inline bool cuda_here() { return torch::cuda::is_available(); }

/// Storage rounding of half (2^-11) and bfloat16 (2^-8) on every tensor that crosses memory, a few
/// ulps for float.
inline double tolerance(torch::ScalarType t) {
  if (t == torch::kHalf) return 1e-2;
  if (t == torch::kBFloat16) return 6e-2;
  return 2e-5;
}

/// The largest difference from the float64 reference, relative to its largest magnitude.
inline double relative_error(const torch::Tensor& got, const torch::Tensor& want) {
  const double scale = want.abs().max().item<double>() + 1e-12;
  return (got.to(torch::kDouble) - want).abs().max().item<double>() / scale;
}

}  // namespace voxfit::kernels::test
