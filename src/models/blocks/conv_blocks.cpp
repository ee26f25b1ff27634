#include "voxfit/models/blocks/conv_blocks.h"

#include <torch/torch.h>

#include "voxfit/models/blocks/layers.h"

namespace voxfit::models {

ConvStackImpl::ConvStackImpl(const ConvStackOptions& o) : act_(o.act()), stride_(o.stride()) {
  check_act_name(act_);
  for (int64_t i = 0; i < o.num_convs(); ++i) {
    const auto n = std::to_string(i);
    convs_.push_back(make_conv(
        o.spatial_dims(), {i == 0 ? o.in() : o.out(), o.out(), o.kernel(), i == 0 ? o.stride() : 1, o.bias(), false}));
    norms_.push_back(make_norm(o.norm(), o.spatial_dims(), o.out()));
    register_module("conv" + n, convs_.back().ptr());
    register_module("norm" + n, norms_.back().ptr());
  }
}

torch::Tensor ConvStackImpl::forward(const torch::Tensor& x) {
  return rest(apply_conv(convs_[0], x, stride_, !norm_cancels_conv_bias(norms_[0])));
}

torch::Tensor ConvStackImpl::forward_concat(const torch::Tensor& a, const torch::Tensor& b) {
  return rest(convs_of_concat(a, b, {{&convs_[0], stride_}}, !norm_cancels_conv_bias(norms_[0]))[0]);
}

torch::Tensor ConvStackImpl::rest(torch::Tensor y) {
  for (size_t i = 0; i < convs_.size(); ++i) {
    if (i > 0) y = apply_conv(convs_[i], y, 1, !norm_cancels_conv_bias(norms_[i]));
    y = apply_norm_act(norms_[i], act_, y);
  }
  return y;
}

UnetBlockImpl::UnetBlockImpl(const UnetBlockOptions& o) : residual_(o.residual()), stride_(o.stride()) {
  const int d = o.spatial_dims();
  conv1_ = make_conv(d, {o.in(), o.out(), o.kernel(), o.stride(), false, false});
  conv2_ = make_conv(d, {o.out(), o.out(), o.kernel(), 1, false, false});
  norm1_ = make_norm(o.norm(), d, o.out());
  norm2_ = make_norm(o.norm(), d, o.out());
  register_module("conv1", conv1_.ptr());
  register_module("conv2", conv2_.ptr());
  register_module("norm1", norm1_.ptr());
  register_module("norm2", norm2_.ptr());
  project_ = residual_ && (o.in() != o.out() || o.stride() != 1);
  if (project_) {
    conv3_ = make_conv(d, {o.in(), o.out(), 1, o.stride(), false, false});
    norm3_ = make_norm(o.norm(), d, o.out());
    register_module("conv3", conv3_.ptr());
    register_module("norm3", norm3_.ptr());
  }
}

torch::Tensor UnetBlockImpl::forward(const torch::Tensor& x) {
  return rest(conv1_.forward(x), project_ ? conv3_.forward(x) : x);
}

torch::Tensor UnetBlockImpl::forward_concat(const torch::Tensor& a, const torch::Tensor& b) {
  // An unprojected residual adds the concatenation itself: nothing to save by not keeping it.
  if (residual_ && !project_) return forward(torch::cat({a, b}, 1));
  // conv3_ is empty unless projected, and then left out.
  const auto c = convs_of_concat(a, b, {{&conv1_, stride_}, {&conv3_, stride_}});
  return rest(c[0], project_ ? c[1] : torch::Tensor());
}

torch::Tensor UnetBlockImpl::rest(const torch::Tensor& c1, const torch::Tensor& c3) {
  const auto y = apply_norm_act(norm1_, "leakyrelu", c1);
  if (!residual_) return apply_norm_act(norm2_, "leakyrelu", conv2_.forward(y));
  const auto shortcut = project_ ? apply_norm_act(norm3_, "none", c3) : c3;
  return apply_norm_act(norm2_, "leakyrelu", conv2_.forward(y), shortcut);
}

UnetrPrUpBlockImpl::UnetrPrUpBlockImpl(const UnetrPrUpBlockOptions& o) {
  transp_init_ = make_conv(3, {o.in(), o.out(), 2, 2, false, true});
  register_module("transp_conv_init", transp_init_.ptr());
  for (int64_t i = 0; i < o.num_layers(); ++i) {
    const auto n = std::to_string(i);
    transp_.push_back(make_conv(3, {o.out(), o.out(), 2, 2, false, true}));
    blocks_.push_back(UnetBlock(UnetBlockOptions(o.out(), o.out()).norm(o.norm()).residual(o.residual())));
    register_module("transp_conv" + n, transp_.back().ptr());
    register_module("block" + n, blocks_.back());
  }
}

torch::Tensor UnetrPrUpBlockImpl::forward(const torch::Tensor& x) {
  auto y = transp_init_.forward(x);
  for (size_t i = 0; i < blocks_.size(); ++i) y = blocks_[i]->forward(transp_[i].forward(y));
  return y;
}

UnetrUpBlockImpl::UnetrUpBlockImpl(const UnetrUpBlockOptions& o) {
  transp_ = make_conv(3, {o.in(), o.out(), 2, 2, false, true});
  block_ = UnetBlock(UnetBlockOptions(2 * o.out(), o.out()).norm(o.norm()).residual(o.residual()));
  register_module("transp_conv", transp_.ptr());
  register_module("conv_block", block_);
}

torch::Tensor UnetrUpBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& skip) {
  return block_->forward_concat(transp_.forward(x), skip);
}

}  // namespace voxfit::models
