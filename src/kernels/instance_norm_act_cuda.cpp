// The autograd node and tensor plumbing of the fused instance-norm kernels (instance_norm.cu).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include "function_args.h"
#include "instance_norm_act_fused.h"
#include "instance_norm_launch.h"
#include "tensor_dtype.h"

namespace voxfit::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

cuda::ActSpec act_of(Activation act, double slope) {
  cuda::ActSpec a;
  a.act = act == Activation::kReLU        ? cuda::Act::kReLU
          : act == Activation::kLeakyReLU ? cuda::Act::kLeakyReLU
                                          : cuda::Act::kNone;
  a.slope = static_cast<float>(slope);
  return a;
}

// fused_instance_norm_supports admits NCDHW-contiguous or channels-last tensors only; a tensor
// that is both (one channel, say) is treated as NCDHW, and its outputs get its strides.
// With `batch` (batch norm's statistics) the whole batch is one instance of N x S rows a channel:
// in channels-last memory N x S rows of C channels, in NCDHW memory the channel's N planes.
cuda::NormShape shape_of(const torch::Tensor& x, bool batch) {
  return cuda::norm_shape(x.size(0), x.size(1), x.numel() / (x.size(0) * x.size(1)), !x.is_contiguous(), batch);
}

c10::MemoryFormat format_of(const torch::Tensor& x) {
  if (x.is_contiguous()) return c10::MemoryFormat::Contiguous;
  return x.dim() == 5 ? c10::MemoryFormat::ChannelsLast3d : c10::MemoryFormat::ChannelsLast;
}

torch::Tensor floats(int64_t n, const torch::Tensor& like) {
  return torch::empty({n}, like.options().dtype(torch::kFloat).memory_format(c10::MemoryFormat::Contiguous));
}

struct ForwardResult {
  torch::Tensor y, mean, rstd;
};

ForwardResult run_forward(const torch::Tensor& x, const torch::Tensor& w32, const torch::Tensor& b32,
                          const torch::Tensor& residual, const NormActSpec& spec, bool batch) {
  const c10::cuda::CUDAGuard guard(x.device());
  const cuda::NormShape s = shape_of(x, batch);
  ForwardResult r{torch::empty_like(x), floats(s.n * s.c, x), floats(s.n * s.c, x)};
  auto ws = floats(cuda::workspace_floats(s), x);
  cuda::instance_norm_act_forward(dtype_of(x), s, x.data_ptr(), ptr_or_null(w32), ptr_or_null(b32),
                                  residual.defined() ? residual.data_ptr() : nullptr, act_of(spec.act, spec.slope),
                                  static_cast<float>(spec.eps), r.y.data_ptr(), r.mean.data_ptr<float>(),
                                  r.rstd.data_ptr<float>(), ws.data_ptr<float>(),
                                  c10::cuda::getCurrentCUDAStream().stream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return r;
}

class InstanceNormActFunction : public torch::autograd::Function<InstanceNormActFunction> {
 public:
  // Returns {y, mean, rstd}; the statistics carry no gradient.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight_or_empty,
                               const torch::Tensor& bias_or_empty, const torch::Tensor& residual_or_empty, int64_t act,
                               double slope, double eps, bool batch) {
    const auto weight = empty_as_absent(weight_or_empty), bias = empty_as_absent(bias_or_empty),
               residual = empty_as_absent(residual_or_empty);
    NormActSpec spec;
    spec.act = static_cast<Activation>(act);
    spec.slope = slope;
    spec.eps = eps;
    const auto w32 = as_float(weight), b32 = as_float(bias);
    auto r = run_forward(x, w32, b32, residual, spec, batch);
    // Without affine parameters and with an invertible activation the normalised input is the
    // output (less the residual added after it): then the input need not be kept. The residual is
    // kept instead, which costs nothing: it is a norm's output or a block's input, kept anyway by
    // that norm or that block's first convolution (one activation-sized tensor less per residual
    // block; 28 MB a sample in each 16-channel 96^3 block of UNETR).
    const bool keep_input = weight.defined() || bias.defined() || spec.act == Activation::kReLU;
    ctx->save_for_backward(
        {keep_input ? x : torch::Tensor(), r.y, r.mean, r.rstd, w32, keep_input ? torch::Tensor() : residual});
    ctx->saved_data["act"] = act;
    ctx->saved_data["slope"] = slope;
    ctx->saved_data["has_weight"] = weight.defined();
    ctx->saved_data["has_bias"] = bias.defined();
    ctx->saved_data["has_residual"] = residual.defined();
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.defined() ? weight.scalar_type() : torch::kFloat);
    ctx->saved_data["batch"] = batch;
    ctx->mark_non_differentiable({r.mean, r.rstd});
    return {r.y, r.mean, r.rstd};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &y = saved[1], &mean = saved[2], &rstd = saved[3], &w32 = saved[4], &r = saved[5];
    const c10::cuda::CUDAGuard guard(y.device());
    const auto dy = grads[0].contiguous(format_of(y));
    const cuda::NormShape s = shape_of(y, ctx->saved_data["batch"].toBool());
    const bool has_residual = ctx->saved_data["has_residual"].toBool();
    auto dx = torch::empty_like(y);
    auto dz = has_residual ? torch::empty_like(y) : torch::Tensor();
    auto sum_dz = floats(s.n * s.c, y), sum_dz_xhat = floats(s.n * s.c, y);
    auto ws = floats(cuda::workspace_floats(s), y);
    cuda::instance_norm_act_backward(
        dtype_of(y), s, dy.data_ptr(), y.data_ptr(), x.defined() ? x.data_ptr() : nullptr,
        r.defined() ? r.data_ptr() : nullptr, mean.data_ptr<float>(), rstd.data_ptr<float>(), ptr_or_null(w32),
        act_of(static_cast<Activation>(ctx->saved_data["act"].toInt()), ctx->saved_data["slope"].toDouble()),
        dx.data_ptr(), has_residual ? dz.data_ptr() : nullptr, sum_dz.data_ptr<float>(), sum_dz_xhat.data_ptr<float>(),
        ws.data_ptr<float>(), c10::cuda::getCurrentCUDAStream().stream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const auto wdtype = static_cast<c10::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    torch::Tensor dw, db;
    if (ctx->saved_data["has_weight"].toBool()) dw = sum_dz_xhat.view({s.n, s.c}).sum(0).to(wdtype);
    if (ctx->saved_data["has_bias"].toBool()) db = sum_dz.view({s.n, s.c}).sum(0).to(wdtype);
    return {dx, dw, db, dz, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool fused_instance_norm_supports(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& residual) {
  if (!x.defined() || !x.is_cuda() || x.dim() < 3) return false;
  const auto t = x.scalar_type();
  if (t != torch::kFloat && t != torch::kHalf && t != torch::kBFloat16) return false;
  // ATen refuses one spatial element in training; the reference path keeps that error.
  if (x.numel() == 0 || x.numel() / (x.size(0) * x.size(1)) < 2) return false;
  const bool cl = (x.dim() == 5 && x.is_contiguous(c10::MemoryFormat::ChannelsLast3d)) ||
                  (x.dim() == 4 && x.is_contiguous(c10::MemoryFormat::ChannelsLast));
  if (!x.is_contiguous() && !cl) return false;
  if (weight.defined() && weight.device() != x.device()) return false;
  if (residual.defined() && (residual.device() != x.device() || residual.scalar_type() != t ||
                             residual.sizes() != x.sizes() || residual.strides() != x.strides()))
    return false;
  return true;
}

bool fused_batch_norm_supports(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& residual) {
  // An NCDHW batch's samples are chunks of the grid's y axis (at most 65535 blocks).
  return fused_instance_norm_supports(x, weight, residual) && (!x.is_contiguous() || x.size(0) <= 65535);
}

namespace {

variable_list norm_act(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                       const torch::Tensor& residual, const NormActSpec& spec, bool batch) {
  const bool grad = torch::GradMode::is_enabled() &&
                    (x.requires_grad() || (weight.defined() && weight.requires_grad()) ||
                     (bias.defined() && bias.requires_grad()) || (residual.defined() && residual.requires_grad()));
  if (!grad) {
    auto r = run_forward(x, as_float(weight), as_float(bias), residual, spec, batch);
    return {r.y, r.mean, r.rstd};
  }
  return InstanceNormActFunction::apply(x, absent_as_empty(weight, x), absent_as_empty(bias, x),
                                        absent_as_empty(residual, x), static_cast<int64_t>(spec.act), spec.slope,
                                        spec.eps, batch);
}

}  // namespace

torch::Tensor instance_norm_act_fused(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                      const torch::Tensor& residual, const NormActSpec& spec) {
  return norm_act(x, weight, bias, residual, spec, false)[0];
}

BatchNormResult batch_norm_act_fused(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                     const torch::Tensor& residual, const NormActSpec& spec) {
  const auto r = norm_act(x, weight, bias, residual, spec, true);
  return {r[0], r[1], r[2]};
}

}  // namespace voxfit::kernels
