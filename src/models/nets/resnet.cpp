#include "voxfit/models/nets/resnet.h"

#include <torch/torch.h>

#include "voxfit/core/error.h"
#include "voxfit/kernels/conv_bias_act.h"
#include "voxfit/models/blocks/layers.h"
#include "voxfit/models/checkpoint.h"
#include "voxfit/models/shape_checks.h"

#include "../registry_support.h"

namespace voxfit::models {

namespace nn = torch::nn;

namespace {
nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

// BatchNorm in eval mode is y = x * s + (beta - mean * s), s = gamma / sqrt(var + eps): folded
// into the bias-free convolution before it as {weight * s, beta - mean * s}, computed in float32
// and stored in the convolution weight's dtype and memory format.
std::vector<torch::Tensor> fold(const nn::Conv2d& c, const nn::BatchNorm2d& bn) {
  torch::NoGradGuard no_grad;
  const auto& w = c->weight;
  const auto s = bn->weight.to(torch::kFloat) / (bn->running_var.to(torch::kFloat) + bn->options.eps()).sqrt();
  auto fw = (w.to(torch::kFloat) * s.view({-1, 1, 1, 1})).to(w.scalar_type()).contiguous(w.suggest_memory_format());
  auto fb = (bn->bias.to(torch::kFloat) - bn->running_mean.to(torch::kFloat) * s).to(w.scalar_type());
  return {fw, fb};
}
}  // namespace

BottleneckImpl::BottleneckImpl(int64_t in, int64_t width, int64_t stride) : stride_(stride) {
  const int64_t out = width * 4;
  conv1_ = register_module("conv1", conv(in, width, 1, 1));
  bn1_ = register_module("bn1", nn::BatchNorm2d(width));
  conv2_ = register_module("conv2", conv(width, width, 3, stride));
  bn2_ = register_module("bn2", nn::BatchNorm2d(width));
  conv3_ = register_module("conv3", conv(width, out, 1, 1));
  bn3_ = register_module("bn3", nn::BatchNorm2d(out));
  if (stride != 1 || in != out) {
    down_conv_ = register_module("downsample_conv", conv(in, out, 1, stride));
    down_bn_ = register_module("downsample_bn", nn::BatchNorm2d(out));
  }
}

void BottleneckImpl::zero_init_last() {
  torch::NoGradGuard no_grad;
  bn3_->weight.zero_();
}

void BottleneckImpl::fold_batch_norm() {
  folded_.clear();
  const std::pair<nn::Conv2d, nn::BatchNorm2d> units[] = {
      {conv1_, bn1_}, {conv2_, bn2_}, {conv3_, bn3_}, {down_conv_, down_bn_}};
  for (const auto& [c, bn] : units) {
    if (!c) continue;
    for (auto& t : fold(c, bn)) folded_.push_back(t);
  }
}

torch::Tensor BottleneckImpl::forward(const torch::Tensor& x) {
  if (!folded_.empty() && !is_training()) {
    using kernels::conv2d_bias_act;
    auto y = conv2d_bias_act(x, folded_[0], folded_[1], {}, 1, 0, true);
    y = conv2d_bias_act(y, folded_[2], folded_[3], {}, stride_, 1, true);
    const auto shortcut = down_conv_ ? conv2d_bias_act(x, folded_[6], folded_[7], {}, stride_, 0, false) : x;
    return conv2d_bias_act(y, folded_[4], folded_[5], shortcut, 1, 0, true);
  }
  auto y = torch::relu(bn1_(conv1_(x)));
  y = torch::relu(bn2_(conv2_(y)));
  y = bn3_(conv3_(y));
  const auto shortcut = down_conv_ ? down_bn_(down_conv_(x)) : x;
  return torch::relu(y + shortcut);
}

ResNetImpl::ResNetImpl(const ResNetOptions& o) : options_(o) {
  if (o.blocks_per_stage().size() != 4)
    throw ModelError("resnet50: blocks_per_stage needs 4 stages, got " + std::to_string(o.blocks_per_stage().size()));
  conv1_ = register_module("conv1", conv(o.in_channels(), 64, 7, 2));
  bn1_ = register_module("bn1", nn::BatchNorm2d(64));
  int64_t in = 64;
  for (size_t stage = 0; stage < 4; ++stage) {
    const int64_t width = 64 << stage;
    if (o.blocks_per_stage()[stage] < 1) throw ModelError("resnet50: blocks_per_stage must all be >= 1");
    for (int64_t i = 0; i < o.blocks_per_stage()[stage]; ++i) {
      const int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
      blocks_.push_back(register_module("layer" + std::to_string(stage + 1) + "_" + std::to_string(i),
                                        Bottleneck(in, width, stride)));
      in = width * 4;
    }
  }
  fc_ = register_module("fc", nn::Linear(in, o.num_classes()));

  torch::NoGradGuard no_grad;
  for (const auto& m : modules(false)) {
    if (auto* c = m->as<nn::Conv2d>()) nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
  }
  if (o.zero_init_last())
    for (auto& b : blocks_) b->zero_init_last();
  if (o.channels_last()) to_channels_last(*this);
}

void ResNetImpl::check_input(const std::vector<int64_t>& shape) const {
  check_channels("resnet50", shape, 2, options_.in_channels());
  if (shape[2] < 32 || shape[3] < 32)
    throw ModelError("resnet50: input " + shape_to_string(shape) + " is smaller than 32x32 (five stride-2 steps)");
}

std::vector<torch::Tensor> ResNetImpl::forward(const torch::Tensor& input) {
  check_input(input.sizes().vec());
  const auto x = input.contiguous(conv_memory_format(2, options_.channels_last()));
  const bool train = is_training();
  const auto stem = [this, train](const torch::Tensor& in) {
    if (!folded_stem_.empty() && !train)
      return torch::max_pool2d(kernels::conv2d_bias_act(in, folded_stem_[0], folded_stem_[1], {}, 2, 3, true), 3, 2, 1);
    return torch::max_pool2d(torch::relu(bn1_(conv1_(in))), 3, 2, 1);
  };
  auto h = maybe_checkpoint(checkpoints(options_.checkpoint(), false), train, stem, x);
  const bool main = checkpoints(options_.checkpoint(), true);
  for (auto& block : blocks_)
    h = maybe_checkpoint(
        main, train, [block](const torch::Tensor& in) mutable { return block->forward(in); }, h);
  return {fc_(h.mean({2, 3}))};
}

bool ResNetImpl::fold_for_inference() {
  folded_stem_ = fold(conv1_, bn1_);
  for (auto& b : blocks_) b->fold_batch_norm();
  return true;
}

std::vector<std::vector<int64_t>> ResNetImpl::output_shapes(const std::vector<int64_t>& in) {
  check_input(in);
  return {{in[0], options_.num_classes()}};
}

// This network's registry entry: CMake lists S_entry() of every src/models/nets/S.cpp for registry()
// (generated voxfit_model_entries.h); the helpers are in registry_support.h.
ModelEntry resnet_entry() {
  ModelEntry e = detail::entry_for<ResNetOptions>(
      "resnet50", "ResNet-50 v1.5 (timm / torchvision), 2D classification, the reference benchmark",
      TaskKind::kClassification2d, detail::classification_context(), 25557032,
      [](ResNetOptions o, const ModelContext& ctx) -> Network {
        return std::make_shared<ResNetImpl>(o.in_channels(ctx.in_channels)
                                                .num_classes(ctx.num_classes)
                                                .checkpoint(ctx.checkpoint)
                                                .channels_last(ctx.channels_last));
      });
  e.listing_order = 40;
  return e;
}

}  // namespace voxfit::models
