#include "voxfit/train/losses.h"

#include <torch/torch.h>

#include "voxfit/core/error.h"

namespace voxfit::train {

namespace F = torch::nn::functional;

namespace {

// Logits and target with the class axis where the logits' memory has it: channels-last logits
// ([B, spatial..., K] in memory) are read through a movedim view, classes last, so softmax runs
// over contiguous rows; ATen's softmax over dim 1 of such a tensor first copies it to NCDHW (two
// permuting copies of the logits and of their gradient a step: 2.4 of UNet3D's 23 ms on an H100).
struct ClassView {
  torch::Tensor logits, target;  // target: int64, a 1 on the class axis
  int64_t dim = 1;               // the class axis
};

ClassView class_view(const torch::Tensor& logits, const torch::Tensor& target) {
  const auto cl = logits.dim() == 5   ? c10::MemoryFormat::ChannelsLast3d
                  : logits.dim() == 4 ? c10::MemoryFormat::ChannelsLast
                                      : c10::MemoryFormat::Contiguous;
  const auto t = target.to(torch::kLong);
  if (logits.is_contiguous() || !logits.is_contiguous(cl)) return {logits, t, 1};
  return {logits.movedim(1, -1), t.movedim(1, -1), logits.dim() - 1};
}

torch::Tensor soft_dice(const ClassView& v, const LossOptions& o) {
  const auto x = torch::softmax(v.logits, v.dim);
  const int64_t classes = x.size(v.dim);
  // One-hot as bool: x * y keeps y for its backward, and a bool copy is a quarter of a float one
  // (12 MB instead of 50 MB a sample at 14 classes and 96^3).
  const auto y = torch::zeros(x.sizes(), x.options().dtype(torch::kBool)).scatter_(v.dim, v.target, true);
  std::vector<int64_t> axes;  // every axis but the class axis (and the batch, unless batch Dice)
  for (int64_t d = o.batch_dice ? 0 : 1; d < x.dim(); ++d)
    if (d != v.dim) axes.push_back(d);
  const auto intersect = (x * y).sum(axes);
  const auto sum_pred = x.sum(axes);
  const auto sum_gt = y.sum(axes, /*keepdim=*/false, torch::kFloat);
  auto dc = (2.0 * intersect + o.smooth) / (sum_gt + sum_pred + o.smooth).clamp_min(1e-8);
  if (!o.include_background) dc = dc.narrow(-1, 1, classes - 1);
  return -dc.mean();
}

}  // namespace

torch::Tensor soft_dice_loss(const torch::Tensor& logits, const torch::Tensor& target, const LossOptions& o) {
  return soft_dice(class_view(logits.to(torch::kFloat), target), o);
}

kernels::DiceCeSpec dice_ce_spec(const LossOptions& o) {
  kernels::DiceCeSpec s;
  s.smooth = o.smooth;
  s.include_background = o.include_background;
  s.batch_dice = o.batch_dice;
  s.weight_ce = o.weight_ce;
  s.weight_dice = o.weight_dice;
  return s;
}

torch::Tensor dice_ce_loss(const torch::Tensor& logits, const torch::Tensor& target, const LossOptions& o) {
  if (kernels::fused_dice_ce_applies(logits, target)) return kernels::dice_ce_fused(logits, target, dice_ce_spec(o));
  const auto v = class_view(logits.to(torch::kFloat), target);
  // Classes last: cross-entropy as F::cross_entropy computes it (log-softmax, the target's term, the
  // mean over voxels) on that axis.
  const auto ce = v.dim == 1 ? F::cross_entropy(v.logits, v.target.squeeze(1))
                             : -torch::log_softmax(v.logits, v.dim).gather(v.dim, v.target).mean();
  return o.weight_ce * ce + o.weight_dice * soft_dice(v, o);
}

namespace {

std::int64_t spatial_voxels(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::size_t i = 2; i < shape.size(); ++i) n *= shape[i];
  return n;
}

// dice_ce keeps for backward, per output [B, K, spatial...]: the float32 log-softmax (cross-entropy)
// and softmax (Dice) outputs and the one-hot target (bool). The logits themselves are kept by none
// of these ops (their float32 casts neither). The fused kernels keep the logits and the target,
// which exist anyway, and B x (3K + 1) float sums.
memory::DtypeBytes dice_ce_saved_for_backward(const std::vector<std::int64_t>& shape, bool fused) {
  if (fused) return {{"float32", static_cast<std::uint64_t>(4 * shape[0] * (3 * shape[1] + 1))}};
  const std::int64_t scores = shape[0] * shape[1] * spatial_voxels(shape);
  return {{"float32", static_cast<std::uint64_t>(2 * 4 * scores)}, {"bool", static_cast<std::uint64_t>(scores)}};
}

LossEntry dice_ce_entry() {
  return {"dice_ce", "nnU-Net's DC_and_CE: cross-entropy + soft Dice (default: foreground classes, per sample)",
          [](const LossOptions& o) -> LossFunction {
            return [o](const torch::Tensor& logits, const torch::Tensor& target) {
              return dice_ce_loss(logits, target, o);
            };
          },
          dice_ce_saved_for_backward};
}

}  // namespace

const std::vector<LossEntry>& loss_registry() {
  static const std::vector<LossEntry> entries = {dice_ce_entry()};
  return entries;
}

std::string loss_names() {
  std::string names;
  for (const auto& e : loss_registry()) names += (names.empty() ? "" : ", ") + e.name;
  return names;
}

const LossEntry& find_loss(const std::string& name) {
  for (const auto& e : loss_registry())
    if (e.name == name) return e;
  throw ConfigError("unknown loss '" + name + "' (known: " + loss_names() + ")");
}

LossFunction make_loss(const LossOptions& o) { return find_loss(o.name).make(o); }

std::vector<double> deep_supervision_weights(std::size_t n) {
  std::vector<double> w(n);
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    w[i] = (n > 1 && i == n - 1) ? 0.0 : 1.0 / static_cast<double>(1ull << i);
    sum += w[i];
  }
  for (auto& v : w) v /= sum;
  return w;
}

torch::Tensor deep_supervision_loss(const std::vector<torch::Tensor>& outputs, const torch::Tensor& target,
                                    const LossOptions& o) {
  TORCH_CHECK(!outputs.empty(), "deep_supervision_loss: no outputs");
  const LossFunction loss = make_loss(o);
  const auto weights = deep_supervision_weights(outputs.size());
  torch::Tensor total;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (weights[i] == 0.0) continue;
    torch::Tensor t = target;
    const auto out_size = outputs[i].sizes().slice(2);
    if (target.sizes().slice(2) != out_size) {
      t = F::interpolate(target.to(torch::kFloat), F::InterpolateFuncOptions()
                                                       .size(std::vector<int64_t>(out_size.begin(), out_size.end()))
                                                       .mode(torch::kNearest))
              .to(torch::kLong);
    }
    const auto term = weights[i] * loss(outputs[i], t);
    total = total.defined() ? total + term : term;
  }
  return total;
}

}  // namespace voxfit::train
