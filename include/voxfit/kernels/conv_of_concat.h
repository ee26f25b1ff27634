#pragma once
// Convolutions of a channel concatenation, conv(cat({a, b}, 1)), through one dispatch. A UNet
// decoder concatenates the upsampled features `a` with the encoder's skip `b` and convolves the
// result (twice in a residual block: the first convolution and the 1x1 projection). Autograd then
// keeps the concatenation for backward, a tensor of a's and b's channels at the decoder's full
// resolution, although the skip is kept anyway (by the encoder block that produced it). The fused
// path (`--kernels fused` and `--lean-decoders on`, CUDA tensors) keeps `a` and `b` instead, and its backward takes
// each part against its slice of the weights, so no concatenation exists in backward either (where a training step's
// memory peaks): the same arithmetic in two halves, the skip's channels less activation memory per decoder stage.
// Elsewhere the ATen composition runs, the reference.
#include <torch/types.h>

#include <vector>

namespace voxfit::kernels {

/// One convolution of the concatenation: weight [out, Ca + Cb, k...], bias [out] or undefined,
/// the same stride and padding on every spatial axis, no dilation or groups.
struct ConcatConv {
  torch::Tensor weight, bias;
  int64_t stride = 1, padding = 0;
};

/// conv_i(cat({a, b}, 1)) for every conv_i, in order: the fused path where it applies, else the
/// reference. Autograd flows to a, b and every weight and bias.
std::vector<torch::Tensor> convs_of_concat(const torch::Tensor& a, const torch::Tensor& b,
                                           const std::vector<ConcatConv>& convs);

/// The ATen composition: torch::cat, then each convolution (autograd keeps the concatenation).
std::vector<torch::Tensor> convs_of_concat_reference(const torch::Tensor& a, const torch::Tensor& b,
                                                     const std::vector<ConcatConv>& convs);

/// The fused path on any device (tests compare it with the reference on the CPU): keeps a and b
/// for backward, not their concatenation. At most two convolutions.
std::vector<torch::Tensor> convs_of_concat_keeping_parts(const torch::Tensor& a, const torch::Tensor& b,
                                                         const std::vector<ConcatConv>& convs);

/// The process-wide `--lean-decoders` switch: off unless set (not yet measured on a GPU: the split
/// backward runs half-channel convolutions, whose speed there is unknown).
bool lean_decoders();
void set_lean_decoders(bool on);

/// True where convs_of_concat takes the fused path for these inputs in the current mode.
bool convs_of_concat_fuses(const torch::Tensor& a);

}  // namespace voxfit::kernels
