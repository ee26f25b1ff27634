#include "voxfit/kernels/conv_of_concat.h"

#include <torch/torch.h>

#include <array>
#include <atomic>

#include "function_args.h"
#include "voxfit/core/torch_compat.h"
#include "voxfit/kernels/instance_norm_act.h"

namespace voxfit::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::vector<int64_t> per_axis(int64_t value, const torch::Tensor& weight) {
  return std::vector<int64_t>(static_cast<size_t>(weight.dim() - 2), value);
}

torch::Tensor convolve(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, int64_t stride,
                       int64_t padding) {
  const auto zeros = per_axis(0, weight);
  return at::convolution(x, weight, bias, per_axis(stride, weight), per_axis(padding, weight), per_axis(1, weight),
                         /*transposed=*/false, zeros, /*groups=*/1);
}

// The type the convolutions compute in: autocast's where it is on for these tensors' device (as
// the reference's convolution would cast), else the inputs' common type.
torch::ScalarType compute_type(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& weight) {
  const auto device = a.device().type();
  if (compat::autocast_enabled(device) && at::isFloatingType(a.scalar_type())) return compat::autocast_dtype(device);
  return at::promote_types(at::promote_types(a.scalar_type(), b.scalar_type()), weight.scalar_type());
}

// Up to two convolutions of cat({a, b}, 1) keeping a and b (cast to the compute type, which they
// usually already have) instead of the concatenation. Absent second convolution / biases: empty.
class ConvsOfConcatFunction : public torch::autograd::Function<ConvsOfConcatFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b,
                               const torch::Tensor& w1, const torch::Tensor& b1_or_empty,
                               const torch::Tensor& w2_or_empty, const torch::Tensor& b2_or_empty, int64_t s1,
                               int64_t p1, int64_t s2, int64_t p2) {
    const auto type = compute_type(a, b, w1);
    const auto ac = a.to(type), bc = b.to(type);
    const auto x = torch::cat({ac, bc}, 1);
    const auto as_type = [&](const torch::Tensor& t) { return t.defined() ? t.to(type) : t; };
    const auto w2 = empty_as_absent(w2_or_empty);
    variable_list out{convolve(x, w1.to(type), as_type(empty_as_absent(b1_or_empty)), s1, p1)};
    if (w2.defined()) out.push_back(convolve(x, w2.to(type), as_type(empty_as_absent(b2_or_empty)), s2, p2));
    ctx->save_for_backward({ac, bc, w1, w2_or_empty});
    ctx->saved_data["a_type"] = static_cast<int64_t>(a.scalar_type());
    ctx->saved_data["b_type"] = static_cast<int64_t>(b.scalar_type());
    ctx->saved_data["bias1"] = b1_or_empty.numel() > 0;
    ctx->saved_data["bias2"] = b2_or_empty.numel() > 0;
    ctx->saved_data["geometry"] = std::vector<int64_t>{s1, p1, s2, p2};
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &a = saved[0], &b = saved[1], &w1 = saved[2];
    const auto w2 = empty_as_absent(saved[3]);
    const auto g = ctx->saved_data["geometry"].toIntVector();
    // Each part against its slice of the weights: no concatenation is rebuilt, so the backward of
    // a decoder, where the step's memory peaks, holds only what the reference path would, less
    // the concatenation.
    torch::Tensor ga, gb;
    std::array<torch::Tensor, 4> gp;  // dw1, db1, dw2, db2
    const auto conv_backward = [&](const torch::Tensor& grad, const torch::Tensor& w, bool has_bias, int64_t stride,
                                   int64_t padding, torch::Tensor& dw, torch::Tensor& db) {
      if (!grad.defined()) return;
      const auto type = a.scalar_type();
      const auto wt = w.to(type);
      const auto part = [&](const torch::Tensor& x, int64_t from, bool bias) {
        const auto slice = wt.narrow(1, from, x.size(1)).contiguous(wt.suggest_memory_format());
        const std::vector<int64_t> bias_sizes{w.size(0)};
        return at::convolution_backward(
            grad.to(type), x, slice,
            bias ? c10::OptionalIntArrayRef(bias_sizes) : c10::OptionalIntArrayRef(c10::nullopt), per_axis(stride, w),
            per_axis(padding, w), per_axis(1, w), false, per_axis(0, w), 1, {true, true, bias});
      };
      auto ra = part(a, 0, has_bias);
      auto rb = part(b, a.size(1), false);
      ga = ga.defined() ? ga.add_(std::get<0>(ra)) : std::get<0>(ra);
      gb = gb.defined() ? gb.add_(std::get<0>(rb)) : std::get<0>(rb);
      dw = torch::cat({std::get<1>(ra), std::get<1>(rb)}, 1).to(w.scalar_type());
      if (has_bias) db = std::get<2>(ra).to(w.scalar_type());
    };
    conv_backward(grads[0], w1, ctx->saved_data["bias1"].toBool(), g[0], g[1], gp[0], gp[1]);
    if (w2.defined()) conv_backward(grads[1], w2, ctx->saved_data["bias2"].toBool(), g[2], g[3], gp[2], gp[3]);
    if (ga.defined()) ga = ga.to(static_cast<torch::ScalarType>(ctx->saved_data["a_type"].toInt()));
    if (gb.defined()) gb = gb.to(static_cast<torch::ScalarType>(ctx->saved_data["b_type"].toInt()));
    return {ga, gb, gp[0], gp[1], gp[2], gp[3], {}, {}, {}, {}};
  }
};

}  // namespace

std::vector<torch::Tensor> convs_of_concat_reference(const torch::Tensor& a, const torch::Tensor& b,
                                                     const std::vector<ConcatConv>& convs) {
  const auto x = torch::cat({a, b}, 1);
  std::vector<torch::Tensor> out;
  for (const auto& c : convs) out.push_back(convolve(x, c.weight, c.bias, c.stride, c.padding));
  return out;
}

std::vector<torch::Tensor> convs_of_concat_keeping_parts(const torch::Tensor& a, const torch::Tensor& b,
                                                         const std::vector<ConcatConv>& convs) {
  TORCH_CHECK(convs.size() == 1 || convs.size() == 2, "convs_of_concat: one or two convolutions, got ", convs.size());
  const ConcatConv none;
  const ConcatConv& c1 = convs[0];
  const ConcatConv& c2 = convs.size() > 1 ? convs[1] : none;
  return ConvsOfConcatFunction::apply(a, b, c1.weight, absent_as_empty(c1.bias, c1.weight),
                                      absent_as_empty(c2.weight, c1.weight), absent_as_empty(c2.bias, c1.weight),
                                      c1.stride, c1.padding, c2.stride, c2.padding);
}

namespace {
std::atomic<bool> g_lean_decoders{false};
}  // namespace

bool lean_decoders() { return g_lean_decoders.load(); }
void set_lean_decoders(bool on) { g_lean_decoders.store(on); }

bool convs_of_concat_fuses(const torch::Tensor& a) {
  // Keeping the parts only matters to autograd; without it the reference allocates the same.
  return kernel_mode() == KernelMode::kFused && lean_decoders() && a.is_cuda() && torch::GradMode::is_enabled();
}

std::vector<torch::Tensor> convs_of_concat(const torch::Tensor& a, const torch::Tensor& b,
                                           const std::vector<ConcatConv>& convs) {
  if (convs_of_concat_fuses(a) && convs.size() <= 2) return convs_of_concat_keeping_parts(a, b, convs);
  return convs_of_concat_reference(a, b, convs);
}

}  // namespace voxfit::kernels
