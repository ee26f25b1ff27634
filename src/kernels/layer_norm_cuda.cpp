// The autograd node and tensor plumbing of the layer-norm kernels (layer_norm.cu).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <limits>

#include "function_args.h"
#include "layer_norm_fused.h"
#include "layer_norm_launch.h"
#include "tensor_dtype.h"

namespace voxfit::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

cuda::RowShape shape_of(const torch::Tensor& x) {
  cuda::RowShape s;
  s.width = x.size(-1);
  s.rows = x.numel() / s.width;
  return s;
}

struct ForwardResult {
  torch::Tensor y, mean, rstd;
};

// x is contiguous, and so is y.
ForwardResult run_forward(const torch::Tensor& x, const torch::Tensor& w32, const torch::Tensor& b32, double eps) {
  const c10::cuda::CUDAGuard guard(x.device());
  const cuda::RowShape s = shape_of(x);
  const auto stats = x.options().dtype(torch::kFloat);
  ForwardResult r{torch::empty_like(x), torch::empty({s.rows}, stats),
                  torch::empty({s.rows}, stats)};
  cuda::layer_norm_forward(dtype_of(x), s, x.data_ptr(), ptr_or_null(w32), ptr_or_null(b32), static_cast<float>(eps),
                           r.y.data_ptr(), r.mean.data_ptr<float>(), r.rstd.data_ptr<float>(),
                           c10::cuda::getCurrentCUDAStream().stream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return r;
}

// What both autograd nodes keep of the parameters: whether each is there, and its dtype for the
// gradient.
void save_parameters(AutogradContext* ctx, const torch::Tensor& weight, const torch::Tensor& bias) {
  ctx->saved_data["has_weight"] = weight.defined();
  ctx->saved_data["has_bias"] = bias.defined();
  ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.defined() ? weight.scalar_type() : torch::kFloat);
  ctx->saved_data["bias_dtype"] = static_cast<int64_t>(bias.defined() ? bias.scalar_type() : torch::kFloat);
}

struct Gradients {
  torch::Tensor dx, dw, db;
};

// The gradients of the norm whose input was x (saved as {x, mean, rstd, w32}) for the output
// gradient dy.
Gradients run_backward(AutogradContext* ctx, const torch::Tensor& dy_any) {
  const auto saved = ctx->get_saved_variables();
  const auto x = saved[0].contiguous();
  const auto &mean = saved[1], &rstd = saved[2], &w32 = saved[3];
  const c10::cuda::CUDAGuard guard(x.device());
  const auto dy = dy_any.to(x.scalar_type()).contiguous();
  const cuda::RowShape s = shape_of(x);
  const bool has_weight = ctx->saved_data["has_weight"].toBool(), has_bias = ctx->saved_data["has_bias"].toBool();
  Gradients g{torch::empty_like(x), {}, {}};
  torch::Tensor partial_dw, partial_db;
  if (has_weight || has_bias) {
    const auto rows = cuda::layer_norm_partial_rows(s);
    partial_dw = torch::empty({rows, s.width}, x.options().dtype(torch::kFloat));
    partial_db = torch::empty_like(partial_dw);
  }
  cuda::layer_norm_backward(dtype_of(x), s, dy.data_ptr(), x.data_ptr(), mean.data_ptr<float>(), rstd.data_ptr<float>(),
                            ptr_or_null(w32), g.dx.data_ptr(), ptr_or_null(partial_dw), ptr_or_null(partial_db),
                            c10::cuda::getCurrentCUDAStream().stream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (has_weight) g.dw = partial_dw.sum(0).to(static_cast<c10::ScalarType>(ctx->saved_data["weight_dtype"].toInt()));
  if (has_bias) g.db = partial_db.sum(0).to(static_cast<c10::ScalarType>(ctx->saved_data["bias_dtype"].toInt()));
  return g;
}

class LayerNormFunction : public torch::autograd::Function<LayerNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight_or_empty,
                               const torch::Tensor& bias_or_empty, double eps) {
    const auto weight = empty_as_absent(weight_or_empty), bias = empty_as_absent(bias_or_empty);
    const auto w32 = as_float(weight);
    auto r = run_forward(x.contiguous(), w32, as_float(bias), eps);
    // x as given, as ATen's layer norm keeps it: a strided view of a tensor kept anyway costs
    // nothing here, and backward makes its own contiguous copy for the moment it runs.
    ctx->save_for_backward({x, r.mean, r.rstd, w32});
    save_parameters(ctx, weight, bias);
    return {r.y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto g = run_backward(ctx, grads[0]);
    return {g.dx, g.dw, g.db, torch::Tensor()};
  }
};

// sum = x + residual, y = layer_norm(sum): the vector kernel's one pass where the pointers are
// aligned, else the add and then the norm.
struct AddForwardResult {
  torch::Tensor sum;
  ForwardResult norm;
};

AddForwardResult run_add_forward(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& w32,
                                 const torch::Tensor& b32, double eps) {
  const c10::cuda::CUDAGuard guard(x.device());
  const cuda::RowShape s = shape_of(x);
  const auto stats = x.options().dtype(torch::kFloat);
  AddForwardResult r{torch::empty_like(x), {torch::empty_like(x), torch::empty({s.rows}, stats), torch::empty({s.rows}, stats)}};
  if (cuda::add_layer_norm_forward(dtype_of(x), s, x.data_ptr(), residual.data_ptr(), ptr_or_null(w32),
                                   ptr_or_null(b32), static_cast<float>(eps), r.sum.data_ptr(), r.norm.y.data_ptr(),
                                   r.norm.mean.data_ptr<float>(), r.norm.rstd.data_ptr<float>(),
                                   c10::cuda::getCurrentCUDAStream().stream())) {
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return r;
  }
  r.sum = x + residual;
  r.norm = run_forward(r.sum, w32, b32, eps);
  return r;
}

// Outputs {sum, y}; the gradient of x and of the residual is the sum's: its own gradient plus the
// norm's input gradient.
class AddLayerNormFunction : public torch::autograd::Function<AddLayerNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& residual,
                               const torch::Tensor& weight_or_empty, const torch::Tensor& bias_or_empty, double eps) {
    const auto weight = empty_as_absent(weight_or_empty), bias = empty_as_absent(bias_or_empty);
    const auto w32 = as_float(weight);
    auto r = run_add_forward(x, residual, w32, as_float(bias), eps);
    ctx->set_materialize_grads(false);  // an unused output's gradient stays undefined, not zeros
    ctx->save_for_backward({r.sum, r.norm.mean, r.norm.rstd, w32});
    save_parameters(ctx, weight, bias);
    return {r.sum, r.norm.y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[1].defined()) return {grads[0], grads[0], torch::Tensor(), torch::Tensor(), torch::Tensor()};
    auto g = run_backward(ctx, grads[1]);
    if (grads[0].defined()) g.dx.add_(grads[0]);
    return {g.dx, g.dx, g.dw, g.db, torch::Tensor()};
  }
};

bool fits(const torch::Tensor& p, const torch::Tensor& x) {
  return !p.defined() || (p.device() == x.device() && p.numel() == x.size(-1));
}

}  // namespace

bool fused_layer_norm_supports(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!x.defined() || !x.is_cuda() || x.dim() < 1 || x.numel() == 0) return false;
  const auto t = x.scalar_type();
  if (t != torch::kFloat && t != torch::kHalf && t != torch::kBFloat16) return false;
  // The kernels index a row with int.
  if (x.size(-1) > std::numeric_limits<int>::max() / 2) return false;
  return fits(weight, x) && fits(bias, x);
}

bool fused_add_layer_norm_supports(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight,
                                   const torch::Tensor& bias) {
  if (!fused_layer_norm_supports(x, weight, bias) || !residual.defined() || !x.is_contiguous() ||
      !residual.is_contiguous() || residual.sizes() != x.sizes() || residual.scalar_type() != x.scalar_type() ||
      residual.device() != x.device())
    return false;
  // The 16-byte-load kernel's rows (layer_norm.cu, vector_chunks): 32 vectors to 1024 elements.
  const int64_t vector = 16 / static_cast<int64_t>(x.element_size()), width = x.size(-1);
  return width % vector == 0 && width >= 32 * vector && width <= 1024;
}

AddNorm add_layer_norm_fused(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight,
                             const torch::Tensor& bias, double eps) {
  const auto needs = [](const torch::Tensor& t) { return t.defined() && t.requires_grad(); };
  if (!torch::GradMode::is_enabled() || !(needs(x) || needs(residual) || needs(weight) || needs(bias))) {
    auto r = run_add_forward(x, residual, as_float(weight), as_float(bias), eps);
    return {r.sum, r.norm.y};
  }
  const auto out =
      AddLayerNormFunction::apply(x, residual, absent_as_empty(weight, x), absent_as_empty(bias, x), eps);
  return {out[0], out[1]};
}

torch::Tensor layer_norm_fused(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                               double eps) {
  const bool grad = torch::GradMode::is_enabled() &&
                    (x.requires_grad() || (weight.defined() && weight.requires_grad()) ||
                     (bias.defined() && bias.requires_grad()));
  if (!grad) return run_forward(x.contiguous(), as_float(weight), as_float(bias), eps).y;
  return LayerNormFunction::apply(x, absent_as_empty(weight, x), absent_as_empty(bias, x), eps)[0];
}

}  // namespace voxfit::kernels
