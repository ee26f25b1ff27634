#pragma once
// Optional tensors in the kernels' autograd functions. torch::autograd::Function::apply records
// every tensor argument's device and dtype: an undefined tensor has neither (LibTorch 2.x throws
// "tensor does not have a device"), so an absent weight, bias or residual travels as an empty tensor.
#include <torch/torch.h>

namespace voxfit::kernels {

inline torch::Tensor absent_as_empty(const torch::Tensor& t, const torch::Tensor& like) {
  return t.defined() ? t : torch::empty({0}, like.options());
}
inline torch::Tensor empty_as_absent(const torch::Tensor& t) { return t.numel() > 0 ? t : torch::Tensor(); }

/// An optional parameter as the kernels read it: float32, contiguous (undefined stays undefined).
inline torch::Tensor as_float(const torch::Tensor& t) {
  return t.defined() ? t.to(torch::kFloat).contiguous() : torch::Tensor();
}
/// The data of an optional float32 tensor, or null.
inline float* ptr_or_null(const torch::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

}  // namespace voxfit::kernels
