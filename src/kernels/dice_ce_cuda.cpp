// The autograd node and tensor plumbing of the fused DiceCE kernels (dice_ce.cu).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include "dice_ce_fused.h"
#include "dice_ce_launch.h"
#include "tensor_dtype.h"

namespace voxfit::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

cuda::LossShape shape_of(const torch::Tensor& logits) {
  cuda::LossShape s;
  s.b = logits.size(0);
  s.k = logits.size(1);
  s.s = logits.numel() / (s.b * s.k);
  s.channels_last = !logits.is_contiguous();  // fused_dice_ce_supports: otherwise channels-last
  return s;
}

// The per-sample sums [B, 3K + 1]: the kernel's partial rows added up in a fixed order.
torch::Tensor loss_sums(const torch::Tensor& logits, const torch::Tensor& target) {
  const cuda::LossShape s = shape_of(logits);
  const int64_t row = 3 * s.k + 1, chunks = cuda::dice_ce_chunks(s);
  auto partial = torch::empty({s.b, chunks, row}, logits.options().dtype(torch::kFloat));
  cuda::dice_ce_stats(dtype_of(logits), s, logits.data_ptr(), target.data_ptr<int64_t>(), partial.data_ptr<float>(),
                      c10::cuda::getCurrentCUDAStream().stream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return partial.sum(1);
}

DiceCeSpec spec_of(AutogradContext* ctx) {
  DiceCeSpec spec;
  spec.smooth = ctx->saved_data["smooth"].toDouble();
  spec.include_background = ctx->saved_data["include_background"].toBool();
  spec.batch_dice = ctx->saved_data["batch_dice"].toBool();
  spec.weight_ce = ctx->saved_data["weight_ce"].toDouble();
  spec.weight_dice = ctx->saved_data["weight_dice"].toDouble();
  return spec;
}

class DiceCeFunction : public torch::autograd::Function<DiceCeFunction> {
 public:
  // target: int64, contiguous [B, S].
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& target,
                               double smooth, bool include_background, bool batch_dice, double weight_ce,
                               double weight_dice) {
    const c10::cuda::CUDAGuard guard(logits.device());
    const auto sums = loss_sums(logits, target);
    ctx->save_for_backward({logits, target, sums});
    ctx->saved_data["smooth"] = smooth;
    ctx->saved_data["include_background"] = include_background;
    ctx->saved_data["batch_dice"] = batch_dice;
    ctx->saved_data["weight_ce"] = weight_ce;
    ctx->saved_data["weight_dice"] = weight_dice;
    return {dice_ce_loss_from_sums(sums, spec_of(ctx), shape_of(logits).s)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &logits = saved[0], &target = saved[1], &sums = saved[2];
    const c10::cuda::CUDAGuard guard(logits.device());
    const cuda::LossShape s = shape_of(logits);
    const auto coef = dice_ce_coefficients(sums, spec_of(ctx), s.s, grads[0]);
    auto grad = torch::empty_like(logits);  // the logits' dtype and layout
    cuda::dice_ce_backward(dtype_of(logits), s, logits.data_ptr(), target.data_ptr<int64_t>(), coef.data_ptr<float>(),
                           grad.data_ptr(), c10::cuda::getCurrentCUDAStream().stream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

bool fused_dice_ce_supports(const torch::Tensor& logits, const torch::Tensor& target) {
  if (!logits.defined() || !logits.is_cuda() || logits.dim() < 3 || logits.numel() == 0) return false;
  const auto t = logits.scalar_type();
  if (t != torch::kFloat && t != torch::kHalf && t != torch::kBFloat16) return false;
  if (logits.size(1) < 2 || logits.size(1) > cuda::kMaxLossClasses) return false;
  const bool cl = (logits.dim() == 5 && logits.is_contiguous(c10::MemoryFormat::ChannelsLast3d)) ||
                  (logits.dim() == 4 && logits.is_contiguous(c10::MemoryFormat::ChannelsLast));
  if (!logits.is_contiguous() && !cl) return false;
  if (!target.defined() || target.device() != logits.device() || target.dim() != logits.dim() ||
      target.size(1) != 1 || c10::isFloatingType(target.scalar_type()))
    return false;
  for (int64_t d = 0; d < logits.dim(); ++d)
    if (d != 1 && target.size(d) != logits.size(d)) return false;
  return true;
}

torch::Tensor dice_ce_on_kernels(const torch::Tensor& logits, const torch::Tensor& target, const DiceCeSpec& spec) {
  const auto t = target.to(torch::kLong).contiguous().view({logits.size(0), -1});
  return DiceCeFunction::apply(logits, t, spec.smooth, spec.include_background, spec.batch_dice, spec.weight_ce,
                               spec.weight_dice)[0];
}

}  // namespace voxfit::kernels
