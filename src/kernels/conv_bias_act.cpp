#include "voxfit/kernels/conv_bias_act.h"

#include <torch/torch.h>

#include "voxfit/kernels/instance_norm_act.h"

#ifdef VOXFIT_WITH_CUDA
#include "conv_bias_act_fused.h"
#endif

namespace voxfit::kernels {

torch::Tensor conv2d_bias_act_reference(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                        const torch::Tensor& residual, int64_t stride, int64_t padding, bool relu) {
  auto y = torch::conv2d(x, weight, bias, stride, padding);
  if (residual.defined()) y.add_(residual);
  return relu ? y.relu_() : y;
}

torch::Tensor conv2d_bias_act(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                              const torch::Tensor& residual, int64_t stride, int64_t padding, bool relu) {
#ifdef VOXFIT_WITH_CUDA
  // cuDNN's fused kernels end in a ReLU; a convolution without one gains nothing from them.
  if (relu && kernel_mode() == KernelMode::kFused && x.is_cuda() && at::globalContext().userEnabledCuDNN() &&
      !(torch::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad())))
    return conv2d_bias_relu_cudnn(x, weight, bias, residual, stride, padding);
#endif
  return conv2d_bias_act_reference(x, weight, bias, residual, stride, padding, relu);
}

}  // namespace voxfit::kernels
