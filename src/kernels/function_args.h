#pragma once
// Optional tensors through torch::autograd::Function::apply, which records every tensor
// argument's device and dtype: an undefined tensor has neither (LibTorch 2.x throws "tensor does
// not have a device"), so an absent weight, bias or residual travels as an empty tensor.
#include <torch/torch.h>

namespace voxfit::kernels {

inline torch::Tensor absent_as_empty(const torch::Tensor& t, const torch::Tensor& like) {
  return t.defined() ? t : torch::empty({0}, like.options());
}
inline torch::Tensor empty_as_absent(const torch::Tensor& t) { return t.numel() > 0 ? t : torch::Tensor(); }

}  // namespace voxfit::kernels
