#include "voxfit/kernels/dice_ce.h"

#include <torch/torch.h>

#include "voxfit/core/error.h"
#include "voxfit/kernels/instance_norm_act.h"

#ifdef VOXFIT_WITH_CUDA
#include "dice_ce_fused.h"
#endif

namespace voxfit::kernels {

namespace {

// The Dice terms' inputs: intersection, predicted and label sums [B or 1, K], and the denominator.
struct DiceSums {
  torch::Tensor inter, pred, label, denominator;
};

DiceSums dice_sums(const torch::Tensor& sums, const DiceCeSpec& spec) {
  const int64_t k = (sums.size(1) - 1) / 3;
  DiceSums d{sums.narrow(1, 0, k), sums.narrow(1, k, k), sums.narrow(1, 2 * k, k), {}};
  if (spec.batch_dice) {
    d.inter = d.inter.sum(0, true);
    d.pred = d.pred.sum(0, true);
    d.label = d.label.sum(0, true);
  }
  d.denominator = (d.label + d.pred + spec.smooth).clamp_min(1e-8);
  return d;
}

// 1 for the classes the Dice mean covers, 0 for the background unless included.
torch::Tensor dice_classes(int64_t k, const DiceCeSpec& spec, const torch::TensorOptions& options) {
  auto selected = torch::ones({k}, options);
  if (!spec.include_background) selected.narrow(0, 0, 1).zero_();
  return selected;
}

}  // namespace

torch::Tensor dice_ce_loss_from_sums(const torch::Tensor& sums, const DiceCeSpec& spec, int64_t voxels) {
  const int64_t k = (sums.size(1) - 1) / 3;
  const DiceSums d = dice_sums(sums, spec);
  auto dice = (2.0 * d.inter + spec.smooth) / d.denominator;
  if (!spec.include_background) dice = dice.narrow(1, 1, k - 1);
  const auto ce = sums.select(1, 3 * k).sum() / static_cast<double>(sums.size(0) * voxels);
  return spec.weight_ce * ce - spec.weight_dice * dice.mean();
}

torch::Tensor dice_ce_coefficients(const torch::Tensor& sums, const DiceCeSpec& spec, int64_t voxels,
                                   const torch::Tensor& grad) {
  const int64_t b = sums.size(0), k = (sums.size(1) - 1) / 3;
  const DiceSums d = dice_sums(sums, spec);
  const auto selected = dice_classes(k, spec, sums.options());
  const double terms = static_cast<double>(d.inter.size(0) * (spec.include_background ? k : k - 1));
  const auto g = grad.to(sums.scalar_type()).reshape({1, 1});
  // -mean(dice): d/dI = -2 / (terms D); d/dP = (2I + smooth) / (terms D^2) where D is not clamped
  // (clamp_min passes the gradient where its input is at least the bound).
  const auto unclamped = (d.label + d.pred + spec.smooth >= 1e-8).to(torch::kFloat);
  const auto scale = g * (spec.weight_dice / terms);
  auto a = (-2.0 / d.denominator) * selected * scale;
  auto c = (2.0 * d.inter + spec.smooth) / (d.denominator * d.denominator) * unclamped * selected * scale;
  const auto e = g * (spec.weight_ce / static_cast<double>(b * voxels));
  return torch::cat({a.expand({b, k}), c.expand({b, k}), e.expand({b, 1})}, 1).contiguous();
}

bool fused_dice_ce_applies(const torch::Tensor& logits, const torch::Tensor& target) {
#ifdef VOXFIT_WITH_CUDA
  return kernel_mode() == KernelMode::kFused && fused_dice_ce_supports(logits, target);
#else
  (void)logits;
  (void)target;
  return false;
#endif
}

torch::Tensor dice_ce_fused(const torch::Tensor& logits, const torch::Tensor& target, const DiceCeSpec& spec) {
#ifdef VOXFIT_WITH_CUDA
  return dice_ce_on_kernels(logits, target, spec);
#else
  (void)logits;
  (void)target;
  (void)spec;
  throw ConfigError("dice_ce_fused: this build has no CUDA kernels");
#endif
}

}  // namespace voxfit::kernels
