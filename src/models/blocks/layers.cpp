#include "voxfit/models/blocks/layers.h"

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
// LibTorch 1.13's modules/instancenorm.h calls functional::detail::instance_norm without including
// it; builds without the torch.h PCH (the asan preset) need it spelled out.
#include <torch/nn/functional/instancenorm.h>
#include <torch/nn/modules/instancenorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/modules/utils.h>

#include <cmath>

#include "voxfit/core/error.h"
#include "voxfit/kernels/conv_of_concat.h"
#include "voxfit/kernels/instance_norm_act.h"
#include "voxfit/kernels/layer_norm.h"

namespace voxfit::models {

namespace nn = torch::nn;

namespace {
int64_t conv_padding(int64_t kernel, int64_t stride) { return (kernel - stride + 1) / 2; }
}  // namespace

torch::nn::AnyModule make_conv(int spatial_dims, const ConvSpec& s) {
  TORCH_CHECK(spatial_dims == 2 || spatial_dims == 3, "make_conv: spatial_dims must be 2 or 3");
  if (s.transposed) {
    if (spatial_dims == 3)
      return nn::AnyModule(
          nn::ConvTranspose3d(nn::ConvTranspose3dOptions(s.in, s.out, s.kernel).stride(s.stride).bias(s.bias)));
    return nn::AnyModule(
        nn::ConvTranspose2d(nn::ConvTranspose2dOptions(s.in, s.out, s.kernel).stride(s.stride).bias(s.bias)));
  }
  const int64_t padding = conv_padding(s.kernel, s.stride);
  if (spatial_dims == 3)
    return nn::AnyModule(
        nn::Conv3d(nn::Conv3dOptions(s.in, s.out, s.kernel).stride(s.stride).padding(padding).bias(s.bias)));
  return nn::AnyModule(
      nn::Conv2d(nn::Conv2dOptions(s.in, s.out, s.kernel).stride(s.stride).padding(padding).bias(s.bias)));
}

bool norm_cancels_conv_bias(const nn::AnyModule& norm) {
  return kernels::kernel_mode() == kernels::KernelMode::kFused &&
         (norm.ptr()->as<nn::InstanceNorm3dImpl>() || norm.ptr()->as<nn::InstanceNorm2dImpl>());
}

// The norm is over x's last dimension alone, the rows kernels::layer_norm takes.
static bool normalises_last_dim(const nn::LayerNorm& norm, const torch::Tensor& x) {
  const auto& shape = norm->options.normalized_shape();
  return shape.size() == 1 && x.dim() >= 1 && x.size(-1) == shape[0];
}

torch::Tensor apply_layer_norm(const nn::LayerNorm& norm, const torch::Tensor& x) {
  const auto& o = norm->options;
  if (!normalises_last_dim(norm, x))
    return torch::layer_norm(x, o.normalized_shape(), norm->weight, norm->bias, o.eps());  // ATen's errors
  return kernels::layer_norm(x, norm->weight, norm->bias, o.eps());
}

kernels::AddNorm apply_add_layer_norm(const nn::LayerNorm& norm, const torch::Tensor& x,
                                      const torch::Tensor& residual) {
  if (!normalises_last_dim(norm, x)) {
    auto sum = x + residual;
    auto normed = apply_layer_norm(norm, sum);
    return {std::move(sum), std::move(normed)};
  }
  return kernels::add_layer_norm(x, residual, norm->weight, norm->bias, norm->options.eps());
}

bool convs_as_matmul() { return kernels::kernel_mode() == kernels::KernelMode::kFused; }

torch::Tensor patch_tokens(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const int64_t dims = x.dim() - 2;
  TORCH_CHECK(dims >= 1 && weight.dim() == x.dim() && weight.size(1) == x.size(1),
              "patch_tokens: expected x [B, C, spatial...] and a weight [out, C, kernel...], got ", x.sizes(), " and ",
              weight.sizes());
  // [B, C, n1, k1, n2, k2, ...] -> [B, n1, n2, ..., C, k1, k2, ...]: a token's values in the weight's order.
  std::vector<int64_t> split{x.size(0), x.size(1)}, order{0};
  int64_t tokens = 1;
  for (int64_t d = 0; d < dims; ++d) {
    const int64_t k = weight.size(2 + d), n = x.size(2 + d) / k;
    TORCH_CHECK(n * k == x.size(2 + d), "patch_tokens: spatial size ", x.size(2 + d),
                " is not a multiple of the patch ", k);
    split.push_back(n);
    split.push_back(k);
    order.push_back(2 + 2 * d);
    tokens *= n;
  }
  order.push_back(1);
  for (int64_t d = 0; d < dims; ++d) order.push_back(3 + 2 * d);
  const auto patches = x.reshape(split).permute(order).reshape({x.size(0), tokens, -1});
  return torch::linear(patches, weight.reshape({weight.size(0), -1}),
                       bias.defined() ? c10::optional<torch::Tensor>(bias) : c10::optional<torch::Tensor>());
}

torch::Tensor pointwise_conv(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const int64_t dims = x.dim() - 2;
  TORCH_CHECK(dims >= 1 && weight.dim() == x.dim() && weight.size(1) == x.size(1) &&
                  weight.numel() == weight.size(0) * weight.size(1),
              "pointwise_conv: expected x [N, C, spatial...] and a weight [out, C, 1...], got ", x.sizes(), " and ",
              weight.sizes());
  const int64_t n = x.size(0), in = x.size(1), out = weight.size(0);
  const auto w = weight.reshape({out, in});
  std::vector<int64_t> last{0}, back{0, dims + 1};  // [N, C, s...] <-> [N, s..., C]
  for (int64_t d = 0; d < dims; ++d) last.push_back(2 + d), back.push_back(1 + d);
  last.push_back(1);
  const auto rows = x.permute(last);
  if (!x.is_contiguous() && rows.is_contiguous()) {  // channels-last: [voxels, in] rows, one product
    const auto flat = rows.reshape({-1, in});
    auto y = bias.defined() ? torch::addmm(bias, flat, w.t()) : torch::mm(flat, w.t());
    auto shape = rows.sizes().vec();
    shape.back() = out;
    return y.view(shape).permute(back);
  }
  auto shape = x.sizes().vec();
  shape[1] = out;
  auto y = torch::bmm(w.expand({n, out, in}), x.contiguous().view({n, in, -1}));
  if (bias.defined()) y.add_(bias.view({1, out, 1}));
  return y.view(shape);
}

torch::Tensor apply_conv(nn::AnyModule& conv, const torch::Tensor& x, int64_t stride, bool with_bias) {
  const auto params = conv.ptr()->named_parameters(/*recurse=*/false);
  const auto* bias = params.find("bias");
  if (with_bias || bias == nullptr) return conv.forward(x);
  const auto& w = params["weight"];
  const int64_t dims = w.dim() - 2;
  return torch::convolution(x, w, {}, std::vector<int64_t>(dims, stride),
                            std::vector<int64_t>(dims, conv_padding(w.size(2), stride)), std::vector<int64_t>(dims, 1),
                            /*transposed=*/false, std::vector<int64_t>(dims, 0), /*groups=*/1);
}

std::vector<torch::Tensor> convs_of_concat(const torch::Tensor& a, const torch::Tensor& b,
                                           const std::vector<std::pair<nn::AnyModule*, int64_t>>& convs,
                                           bool with_bias) {
  if (!kernels::convs_of_concat_fuses(a)) {  // the reference: the concatenation, each module's forward
    const auto x = torch::cat({a, b}, 1);
    std::vector<torch::Tensor> out;
    for (const auto& [conv, stride] : convs)
      if (!conv->is_empty()) out.push_back(apply_conv(*conv, x, stride, with_bias));
    return out;
  }
  std::vector<kernels::ConcatConv> specs;
  for (const auto& [conv, stride] : convs) {
    if (conv->is_empty()) continue;
    const auto params = conv->ptr()->named_parameters(/*recurse=*/false);
    kernels::ConcatConv c;
    c.weight = params["weight"];
    if (const auto* bias = params.find("bias"); bias && with_bias) c.bias = *bias;
    c.stride = stride;
    c.padding = conv_padding(c.weight.size(2), stride);
    specs.push_back(c);
  }
  return kernels::convs_of_concat(a, b, specs);
}

bool is_norm_name(const std::string& name) {
  return name == "instance" || name == "instance_affine" || name == "batch" || name == "none";
}

torch::nn::AnyModule make_norm(const std::string& name, int spatial_dims, int64_t channels, const std::string& what) {
  if (!is_norm_name(name))
    throw ConfigError(what + ": expected instance, instance_affine, batch or none, got '" + name + "'");
  if (name == "none") return nn::AnyModule(nn::Identity());
  if (name == "batch") {
    if (spatial_dims == 3) return nn::AnyModule(nn::BatchNorm3d(channels));
    return nn::AnyModule(nn::BatchNorm2d(channels));
  }
  const bool affine = name == "instance_affine";
  if (spatial_dims == 3) return nn::AnyModule(nn::InstanceNorm3d(nn::InstanceNorm3dOptions(channels).affine(affine)));
  return nn::AnyModule(nn::InstanceNorm2d(nn::InstanceNorm2dOptions(channels).affine(affine)));
}

void check_act_name(const std::string& name, const std::string& what) {
  if (name != "leakyrelu" && name != "relu" && name != "gelu" && name != "none")
    throw ConfigError(what + ": expected leakyrelu, relu, gelu or none, got '" + name + "'");
}

namespace {
// What torch::nn::BatchNorm3d's forward does (the batches counted, the momentum or the cumulative
// average), with the norm, residual and activation on kernels::batch_norm_act.
torch::Tensor batch_norm_act(nn::BatchNorm3dImpl& bn, const torch::Tensor& x, const torch::Tensor& residual,
                             kernels::NormActSpec spec) {
  const auto& o = bn.options;
  kernels::RunningStats running;
  running.momentum = o.momentum().value_or(0.0);
  if (o.track_running_stats()) {
    running.mean = bn.running_mean;
    running.var = bn.running_var;
    if (bn.is_training() && bn.num_batches_tracked.defined()) {
      bn.num_batches_tracked += 1;
      if (!o.momentum()) running.momentum = 1.0 / bn.num_batches_tracked.item<double>();
    }
  }
  spec.eps = o.eps();
  return kernels::batch_norm_act(x, bn.weight, bn.bias, running, bn.is_training(), residual, spec);
}
}  // namespace

torch::Tensor apply_norm_act(torch::nn::AnyModule& norm, const std::string& act, const torch::Tensor& x,
                             const torch::Tensor& residual) {
  // In place, as MONAI's and nnU-Net's conv blocks do: the activation always follows a norm or a
  // residual add, whose output nothing else reads, so its input need not be kept for backward
  // (one activation-sized tensor less per conv unit; 28 MB a sample for each 16-channel 96^3 one).
  kernels::NormActSpec spec;
  spec.act = act == "leakyrelu" ? kernels::Activation::kLeakyReLU
             : act == "relu"    ? kernels::Activation::kReLU
                                : kernels::Activation::kNone;
  if (act != "gelu") {
    if (const auto* in3 = norm.ptr()->as<nn::InstanceNorm3dImpl>()) {
      spec.eps = in3->options.eps();
      return kernels::instance_norm_act(x, in3->weight, in3->bias, residual, spec);
    }
    if (const auto* in2 = norm.ptr()->as<nn::InstanceNorm2dImpl>()) {
      spec.eps = in2->options.eps();
      return kernels::instance_norm_act(x, in2->weight, in2->bias, residual, spec);
    }
    if (auto* bn = norm.ptr()->as<nn::BatchNorm3dImpl>()) return batch_norm_act(*bn, x, residual, spec);
  }
  auto y = norm.forward(x);
  if (residual.defined()) y = y + residual;
  if (act == "leakyrelu") return torch::leaky_relu_(y, spec.slope);
  if (act == "relu") return torch::relu_(y);
  if (act == "gelu") return torch::gelu(y);
  return y;
}

void trunc_normal_(torch::Tensor t, double std, double a, double b) {
  torch::NoGradGuard no_grad;
  // Bounds beyond 6 sigma cut off less than 1e-9 of the mass: a clamped normal is the same
  // distribution and several times faster than the inverse-CDF route (86M weights for ViT-B).
  if (a <= -6 * std && b >= 6 * std) {
    t.normal_(0.0, std).clamp_(a, b);
    return;
  }
  const auto cdf = [](double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; };
  const double lo = cdf(a / std), hi = cdf(b / std);
  t.uniform_(2 * lo - 1, 2 * hi - 1);
  t.erfinv_();
  t.mul_(std * std::sqrt(2.0));
  t.clamp_(a, b);
}

void init_he_weights(torch::nn::Module& m) {
  namespace nn = torch::nn;
  torch::NoGradGuard no_grad;
  for (const auto& module : m.modules(/*include_self=*/false)) {  // from a constructor: not yet shared
    torch::Tensor w, b;
    if (auto* c = module->as<nn::Conv3d>())
      w = c->weight, b = c->bias;
    else if (auto* t = module->as<nn::ConvTranspose3d>())
      w = t->weight, b = t->bias;
    else
      continue;
    nn::init::kaiming_normal_(w, 0.01);
    if (b.defined()) b.zero_();
  }
}

void init_transformer_weights(torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  for (const auto& child : m.modules(/*include_self=*/false)) {
    if (auto* linear = child->as<nn::Linear>()) {
      trunc_normal_(linear->weight, 0.02);
      if (linear->bias.defined()) linear->bias.zero_();
    } else if (auto* ln = child->as<nn::LayerNorm>()) {
      if (ln->weight.defined()) ln->weight.fill_(1.0);
      if (ln->bias.defined()) ln->bias.zero_();
    }
  }
}

void to_channels_last(torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  const auto convert = [](torch::Tensor& t) {
    if (!t.defined()) return;
    if (t.dim() == 5) t.set_data(t.contiguous(c10::MemoryFormat::ChannelsLast3d));
    if (t.dim() == 4) t.set_data(t.contiguous(c10::MemoryFormat::ChannelsLast));
  };
  for (auto& p : m.parameters()) convert(p);
  for (auto& b : m.buffers()) convert(b);
}

}  // namespace voxfit::models
