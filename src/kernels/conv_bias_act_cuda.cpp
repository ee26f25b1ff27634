// at::cudnn_convolution_relu / cudnn_convolution_add_relu: cuDNN's runtime-fused convolution with
// the bias, the residual and the ReLU in its epilogue (what PyTorch's FX fuser and freezing use).
#include <torch/torch.h>

#include "conv_bias_act_fused.h"

namespace voxfit::kernels {

torch::Tensor conv2d_bias_relu_cudnn(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                     const torch::Tensor& residual, int64_t stride, int64_t padding) {
  const std::vector<int64_t> strides{stride, stride}, paddings{padding, padding}, dilation{1, 1};
  c10::optional<at::Tensor> b;
  if (bias.defined()) b = bias;
  if (residual.defined())
    return at::cudnn_convolution_add_relu(x, weight, residual, at::Scalar(1.0), b, strides, paddings, dilation, 1);
  return at::cudnn_convolution_relu(x, weight, b, strides, paddings, dilation, 1);
}

}  // namespace voxfit::kernels
