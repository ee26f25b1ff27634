#pragma once
// The small layer factory every net builds from (MONAI's Conv/Norm/Act factories in spirit):
// layers chosen by name and by 2D vs 3D, and the initialisations the reference nets use.
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

#include "voxfit/kernels/layer_norm.h"

namespace voxfit::models {

/// A convolution of `spatial_dims` (2 or 3) dimensions with a cubic kernel.
struct ConvSpec {
  int64_t in = 1;
  int64_t out = 1;
  int64_t kernel = 3;
  int64_t stride = 1;
  bool bias = false;
  /// ConvTranspose: an upsampling by `stride` (kernel == stride, no padding in the references).
  bool transposed = false;
};

/// Conv2d/Conv3d with MONAI's padding (kernel - stride + 1) / 2, i.e. "same" for stride 1 and
/// odd kernels; ConvTranspose2d/3d when `spec.transposed`.
torch::nn::AnyModule make_conv(int spatial_dims, const ConvSpec& spec);

/// True where a convolution's bias feeding `norm` is left out: an instance norm subtracts each
/// channel's mean over the sample, so a per-channel constant before it changes nothing the network
/// computes and its gradient is zero. With `--kernels fused` (the default) such a bias is neither
/// added nor given a gradient: cuDNN adds a bias as a separate pass and ATen sums its gradient
/// over the whole activation, 3 of UNet3D's 23 ms a step on an H100 for nnU-Net's convolutions,
/// which keep the parameter (their checkpoints have it). `--kernels aten` adds it: the reference.
bool norm_cancels_conv_bias(const torch::nn::AnyModule& norm);

/// True where embed_patches and apply_pointwise take their matrix products (`--kernels fused`).
bool convs_as_matmul();

/// A make_conv convolution (not transposed) of x with `stride`, without its bias unless `with_bias`.
torch::Tensor apply_conv(torch::nn::AnyModule& conv, const torch::Tensor& x, int64_t stride, bool with_bias = true);

/// The convolutions of a decoder's concatenation cat({a, b}, 1) (each a make_conv convolution with
/// its stride; undefined modules are left out), through kernels::convs_of_concat: with the fused
/// kernels autograd keeps a and b, not the concatenation. Biases only `with_bias`.
std::vector<torch::Tensor> convs_of_concat(const torch::Tensor& a, const torch::Tensor& b,
                                           const std::vector<std::pair<torch::nn::AnyModule*, int64_t>>& convs,
                                           bool with_bias = true);

/// Normalisation by name: "instance" (InstanceNorm without affine parameters, MONAI's default),
/// "instance_affine" (nnU-Net's), "batch", "none". Throws ConfigError naming `what` otherwise.
torch::nn::AnyModule make_norm(const std::string& name, int spatial_dims, int64_t channels,
                               const std::string& what = "norm_name");
/// True if `name` is one make_norm accepts.
bool is_norm_name(const std::string& name);

/// Activation names: "leakyrelu" (slope 0.01, as nnU-Net and MONAI), "relu", "gelu" (exact),
/// "none". Throws ConfigError naming `what` for any other.
void check_act_name(const std::string& name, const std::string& what = "activation");

/// act(norm(x) + residual) (residual: undefined for none). An instance norm followed by none,
/// relu or leakyrelu runs through kernels::instance_norm_act: one fused CUDA pass where
/// `--kernels fused` applies, else the ATen composition. Other norms and activations run their
/// modules. relu / leakyrelu work in place on the norm's output, which nothing else reads.
torch::Tensor apply_norm_act(torch::nn::AnyModule& norm, const std::string& act, const torch::Tensor& x,
                             const torch::Tensor& residual = {});

/// Applies a Linear layer through at::linear, which folds the bias into the matrix product for
/// inputs of any rank. LibTorch's C++ nn::Linear runs matmul then a separate broadcast add_ of
/// the bias beyond 2D: one extra kernel per layer, a third of ViT-B/16's inference time on the
/// H200 (experiments/results/h200/performance.md).
inline torch::Tensor apply_linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  return torch::linear(
      x, layer->weight,
      layer->bias.defined() ? c10::optional<torch::Tensor>(layer->bias) : c10::optional<torch::Tensor>());
}

/// A LayerNorm module (normalised over the last dimension) through kernels::layer_norm: voxfit's
/// kernel on CUDA under `--kernels fused`, which keeps the input as given and returns its dtype
/// (ATen under autocast keeps a float32 cast and returns float32), else the module's own ATen op.
torch::Tensor apply_layer_norm(const torch::nn::LayerNorm& norm, const torch::Tensor& x);

/// x + residual and its norm by `norm`, through kernels::add_layer_norm: one kernel for both under
/// `--kernels fused` where it applies (ViT-B's half rows at inference), else the add and
/// apply_layer_norm.
kernels::AddNorm apply_add_layer_norm(const torch::nn::LayerNorm& norm, const torch::Tensor& x,
                                      const torch::Tensor& residual);

/// A convolution whose kernel equals its stride, with no padding (a ViT's patch embedding), as one
/// matrix product over the non-overlapping patches: tokens [B, L, out] in the order
/// conv(x).flatten(2).transpose(1, 2) gives them (L = the patch grid, row-major). `weight` is the
/// convolution's [out, C, k...], `bias` its [out] or undefined. The same sums in another order: cuDNN
/// has no fast kernel for a 16^3 stride-16 convolution of one channel (4.7 TFLOP/s, 0.58 ms of
/// UNETR's step on an H100) nor for ViT's 16^2 one (0.53 ms of ViT-B/16's inference at batch 64).
torch::Tensor patch_tokens(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

/// A patch-embedding convolution (Conv2d / Conv3d module, kernel == stride, no padding) of x as
/// tokens [B, L, out]: patch_tokens under `--kernels fused`, the module under `--kernels aten`.
template <typename Conv>
torch::Tensor embed_patches(Conv& conv, const torch::Tensor& x) {
  if (convs_as_matmul()) return patch_tokens(x, conv->weight, conv->bias);
  return conv(x).flatten(2).transpose(1, 2);
}

/// A pointwise convolution (kernel 1, stride 1, no padding) of x [N, in, spatial...]: `weight`
/// [out, in, 1...], `bias` [out] or undefined; the result in x's layout. As matrix products: in NCDHW
/// one per sample, W [out, in] x X [in, voxels] (a batched product over the samples, no layout
/// change); in channels-last one over all voxels, X [voxels, in] x W^T with the bias in the
/// product's epilogue. The same sums in another order: cuDNN runs NCDHW 1x1x1 convolutions on NHWC
/// kernels with a transpose each way, 8% of a MedNeXt-S step on an H200 (performance-notes 44).
torch::Tensor pointwise_conv(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

/// A pointwise Conv module (Conv2d / Conv3d, kernel 1, stride 1, no padding) of x: pointwise_conv
/// for CUDA tensors under `--kernels fused` (the transposes are cuDNN's; on the CPU oneDNN's
/// convolution stays, and with it the CPU's memory behaviour the estimates are fitted to), the
/// module otherwise.
template <typename Conv>
torch::Tensor apply_pointwise(Conv& conv, const torch::Tensor& x) {
  if (convs_as_matmul() && x.is_cuda()) return pointwise_conv(x, conv->weight, conv->bias);
  return conv(x);
}

/// Fills `t` from N(0, std) truncated to [a, b] (absolute bounds, as timm's and MONAI's
/// trunc_normal_), by inverting the normal CDF like PyTorch's implementation.
void trunc_normal_(torch::Tensor t, double std = 0.02, double a = -2.0, double b = 2.0);

/// timm's ViT init over every submodule of `m`: Linear weights trunc-normal(0.02), biases 0;
/// LayerNorm weight 1, bias 0. Convolutions keep LibTorch's default (as in timm and MONAI).
void init_transformer_weights(torch::nn::Module& m);

/// nnU-Net's InitWeights_He(1e-2) over every submodule of `m`: each Conv3d and ConvTranspose3d weight
/// He-normal with a = 0.01 on its fan-in (LibTorch's, as PyTorch's: a transposed convolution's
/// fan-in is its output channels times the kernel), biases 0; norms keep their defaults.
void init_he_weights(torch::nn::Module& m);

/// Moves every 4-D / 5-D parameter and buffer of `m` to ChannelsLast / ChannelsLast3d, so
/// convolutions run in that layout (inputs are converted in the nets' forward).
void to_channels_last(torch::nn::Module& m);

/// The memory format a net's conv input should use.
inline c10::MemoryFormat conv_memory_format(int spatial_dims, bool channels_last) {
  if (!channels_last) return c10::MemoryFormat::Contiguous;
  return spatial_dims == 3 ? c10::MemoryFormat::ChannelsLast3d : c10::MemoryFormat::ChannelsLast;
}

}  // namespace voxfit::models
