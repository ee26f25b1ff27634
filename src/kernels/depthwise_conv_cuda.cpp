// The autograd node and tensor plumbing of the depthwise 3D convolution kernels (depthwise_conv.cu).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include "depthwise_conv_fused.h"
#include "depthwise_conv_launch.h"
#include "function_args.h"
#include "tensor_dtype.h"

namespace voxfit::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

cuda::VolumeShape shape_of(const torch::Tensor& x) {
  cuda::VolumeShape s;
  s.n = x.size(0);
  s.c = x.size(1);
  s.d = x.size(2);
  s.h = x.size(3);
  s.w = x.size(4);
  return s;
}

int kernel_of(const torch::Tensor& weight) { return static_cast<int>(weight.size(2)); }

// [C, 1, k, k, k] as the kernels read it: float32, contiguous; flipped along every axis for the
// input gradient.
torch::Tensor taps(const torch::Tensor& weight, bool flip) {
  auto w = weight.to(torch::kFloat);
  if (flip) w = w.flip({2, 3, 4});
  return w.contiguous();
}

torch::Tensor run_forward(const torch::Tensor& x, const torch::Tensor& w32, const torch::Tensor& b32) {
  auto y = torch::empty_like(x, x.options().memory_format(c10::MemoryFormat::Contiguous));
  cuda::depthwise3d_forward(dtype_of(x), shape_of(x), kernel_of(w32), x.data_ptr(), w32.data_ptr<float>(),
                            ptr_or_null(b32), y.data_ptr(), c10::cuda::getCurrentCUDAStream().stream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}

class DepthwiseConv3dFunction : public torch::autograd::Function<DepthwiseConv3dFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias_or_empty) {
    const c10::cuda::CUDAGuard guard(x.device());
    const auto bias = empty_as_absent(bias_or_empty);
    ctx->save_for_backward({x, weight});
    ctx->saved_data["has_bias"] = bias.defined();
    ctx->saved_data["bias_dtype"] = static_cast<int64_t>(bias.defined() ? bias.scalar_type() : torch::kFloat);
    return {run_forward(x, taps(weight, false), as_float(bias))};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1];
    const c10::cuda::CUDAGuard guard(x.device());
    const auto dy = grads[0].to(x.scalar_type()).contiguous();
    const auto s = shape_of(x);
    const int k = kernel_of(weight);
    // The input's gradient is the same correlation of dy with the flipped filter (stride 1, padding k / 2).
    const auto dx = run_forward(dy, taps(weight, true), torch::Tensor());
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    auto dw = torch::empty({s.c, k * k * k}, x.options().dtype(torch::kFloat));
    auto db = has_bias ? torch::empty({s.c}, dw.options()) : torch::Tensor();
    auto ws = torch::empty({cuda::depthwise3d_workspace_floats(s, k)}, dw.options());
    cuda::depthwise3d_backward_weight(dtype_of(x), s, k, x.data_ptr(), dy.data_ptr(), dw.data_ptr<float>(),
                                      ptr_or_null(db), ws.data_ptr<float>(),
                                      c10::cuda::getCurrentCUDAStream().stream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (has_bias) db = db.to(static_cast<c10::ScalarType>(ctx->saved_data["bias_dtype"].toInt()));
    return {dx, dw.view(weight.sizes()).to(weight.scalar_type()), db};
  }
};

}  // namespace

bool fused_depthwise_conv3d_supports(const torch::Tensor& x, const torch::Tensor& weight) {
  if (!x.defined() || !x.is_cuda() || x.dim() != 5 || !x.is_contiguous()) return false;
  const auto t = x.scalar_type();
  if (t != torch::kFloat && t != torch::kHalf && t != torch::kBFloat16) return false;
  if (!weight.defined() || weight.device() != x.device() || weight.dim() != 5 || weight.size(0) != x.size(1) ||
      weight.size(1) != 1)
    return false;
  const int64_t k = weight.size(2);
  if (weight.size(3) != k || weight.size(4) != k) return false;
  return cuda::depthwise3d_supported(shape_of(x), static_cast<int>(k));
}

torch::Tensor depthwise_conv3d_fused(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const bool grad = torch::GradMode::is_enabled() &&
                    (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
  if (!grad) {
    const c10::cuda::CUDAGuard guard(x.device());
    return run_forward(x, taps(weight, false), as_float(bias));
  }
  return DepthwiseConv3dFunction::apply(x, weight, absent_as_empty(bias, x))[0];
}

}  // namespace voxfit::kernels
