#pragma once
// Convolutional building blocks shared by the segmentation nets: nnU-Net's stacked
// conv-norm-act, and MONAI's UNETR-family residual / basic blocks and up-sampling blocks.
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <string>
#include <vector>

namespace voxfit::models {

/// `num_convs` x (conv + norm + activation), the first conv strided (nnU-Net's StackedConvBlocks).
struct ConvStackOptions {
  ConvStackOptions(int64_t in, int64_t out) : in_(in), out_(out) {}
  TORCH_ARG(int64_t, in);
  TORCH_ARG(int64_t, out);
  /// Number of conv-norm-act units.
  TORCH_ARG(int64_t, num_convs) = 2;
  /// Stride of the first conv (2 = this stack downsamples).
  TORCH_ARG(int64_t, stride) = 1;
  TORCH_ARG(int64_t, kernel) = 3;
  /// Convolution bias (nnU-Net plans it on).
  TORCH_ARG(bool, bias) = true;
  /// A make_norm name.
  TORCH_ARG(std::string, norm) = "instance_affine";
  /// An activation name (check_act_name).
  TORCH_ARG(std::string, act) = "leakyrelu";
  TORCH_ARG(int, spatial_dims) = 3;
};

class ConvStackImpl : public torch::nn::Module {
 public:
  explicit ConvStackImpl(const ConvStackOptions& options);
  torch::Tensor forward(const torch::Tensor& x);
  /// forward(cat({a, b}, 1)); with the fused kernels autograd keeps a and b, not the concatenation.
  torch::Tensor forward_concat(const torch::Tensor& a, const torch::Tensor& b);

 private:
  torch::Tensor rest(torch::Tensor y);  ///< every norm + act and the later convolutions
  std::string act_;
  int64_t stride_ = 1;
  std::vector<torch::nn::AnyModule> convs_, norms_;
};
TORCH_MODULE(ConvStack);

/// MONAI's UnetResBlock (`residual`) or UnetBasicBlock: conv-norm-lrelu, conv-norm, then the
/// (projected, when channels or stride change) input added before the last lrelu. Convs have no bias.
struct UnetBlockOptions {
  UnetBlockOptions(int64_t in, int64_t out) : in_(in), out_(out) {}
  TORCH_ARG(int64_t, in);
  TORCH_ARG(int64_t, out);
  TORCH_ARG(int64_t, kernel) = 3;
  TORCH_ARG(int64_t, stride) = 1;
  /// A make_norm name; MONAI's "instance" has no affine parameters.
  TORCH_ARG(std::string, norm) = "instance";
  /// UnetResBlock (true) or UnetBasicBlock (false).
  TORCH_ARG(bool, residual) = true;
  TORCH_ARG(int, spatial_dims) = 3;
};

class UnetBlockImpl : public torch::nn::Module {
 public:
  explicit UnetBlockImpl(const UnetBlockOptions& options);
  torch::Tensor forward(const torch::Tensor& x);
  /// forward(cat({a, b}, 1)); with the fused kernels autograd keeps a and b, not the concatenation.
  torch::Tensor forward_concat(const torch::Tensor& a, const torch::Tensor& b);

 private:
  /// The block after its first convolution (c1) and projection (c3: conv3 of the input, or the
  /// input itself where nothing is projected).
  torch::Tensor rest(const torch::Tensor& c1, const torch::Tensor& c3);
  bool residual_ = true;
  int64_t stride_ = 1;
  bool project_ = false;
  torch::nn::AnyModule conv1_, conv2_, conv3_, norm1_, norm2_, norm3_;
};
TORCH_MODULE(UnetBlock);

/// MONAI's UnetrPrUpBlock (conv_block and res_block on): a transposed conv from the transformer
/// width, then `num_layers` x (transposed conv + UnetBlock), each doubling the resolution.
struct UnetrPrUpBlockOptions {
  UnetrPrUpBlockOptions(int64_t in, int64_t out, int64_t num_layers) : in_(in), out_(out), num_layers_(num_layers) {}
  TORCH_ARG(int64_t, in);
  TORCH_ARG(int64_t, out);
  TORCH_ARG(int64_t, num_layers);
  TORCH_ARG(std::string, norm) = "instance";
  TORCH_ARG(bool, residual) = true;
};

class UnetrPrUpBlockImpl : public torch::nn::Module {
 public:
  explicit UnetrPrUpBlockImpl(const UnetrPrUpBlockOptions& options);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::AnyModule transp_init_;
  std::vector<torch::nn::AnyModule> transp_;
  std::vector<UnetBlock> blocks_;
};
TORCH_MODULE(UnetrPrUpBlock);

/// MONAI's UnetrUpBlock: transposed conv (x2), concatenation with the skip, UnetBlock(2*out -> out).
struct UnetrUpBlockOptions {
  UnetrUpBlockOptions(int64_t in, int64_t out) : in_(in), out_(out) {}
  TORCH_ARG(int64_t, in);
  TORCH_ARG(int64_t, out);
  TORCH_ARG(std::string, norm) = "instance";
  TORCH_ARG(bool, residual) = true;
};

class UnetrUpBlockImpl : public torch::nn::Module {
 public:
  explicit UnetrUpBlockImpl(const UnetrUpBlockOptions& options);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& skip);

 private:
  torch::nn::AnyModule transp_;
  UnetBlock block_{nullptr};
};
TORCH_MODULE(UnetrUpBlock);

}  // namespace voxfit::models
