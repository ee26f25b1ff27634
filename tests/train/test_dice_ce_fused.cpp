// The fused DiceCE loss (kernels::dice_ce_fused): on the CPU, the closed forms its kernels are built
// on (the loss from per-sample sums, the gradient from per-sample coefficients), in float64, against
// the ATen reference (which computes in float32) and its autograd gradient; on a GPU, the kernels themselves against the
// reference in every dtype, layout and setting, and what they keep for backward.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "voxfit/kernels/dice_ce.h"
#include "voxfit/kernels/instance_norm_act.h"
#include "voxfit/memory/oom.h"
#include "voxfit/train/losses.h"

namespace voxfit::train {
namespace {

// The sums the stats kernel writes, by ATen: [B, 3K + 1].
torch::Tensor sums_by_aten(const torch::Tensor& logits, const torch::Tensor& target) {
  const int64_t b = logits.size(0), k = logits.size(1);
  const auto p = torch::softmax(logits, 1).reshape({b, k, -1});
  const auto t = target.reshape({b, 1, -1});
  const auto onehot = torch::zeros_like(p).scatter_(1, t, 1.0);
  const auto ce = -torch::log_softmax(logits, 1).reshape({b, k, -1}).gather(1, t).sum({1, 2});
  return torch::cat({(p * onehot).sum(2), p.sum(2), onehot.sum(2), ce.unsqueeze(1)}, 1);
}

// The gradient the backward kernel writes, by ATen from the coefficients.
torch::Tensor gradient_by_aten(const torch::Tensor& logits, const torch::Tensor& target, const torch::Tensor& coef) {
  const int64_t b = logits.size(0), k = logits.size(1);
  const auto p = torch::softmax(logits, 1).reshape({b, k, -1});
  const auto onehot = torch::zeros_like(p).scatter_(1, target.reshape({b, 1, -1}), 1.0);
  const auto a = coef.narrow(1, 0, k).unsqueeze(2), c = coef.narrow(1, k, k).unsqueeze(2);
  const auto e = coef.narrow(1, 2 * k, 1).unsqueeze(2);
  const auto g = a * onehot + c;
  const auto dot = (p * g).sum(1, true);
  return (p * (g - dot) + e * (p - onehot)).reshape(logits.sizes());
}

std::vector<LossOptions> loss_settings() {
  std::vector<LossOptions> all;
  for (const bool batch_dice : {false, true})
    for (const bool background : {false, true}) {
      LossOptions o;
      o.batch_dice = batch_dice;
      o.include_background = background;
      all.push_back(o);
    }
  LossOptions weighted;
  weighted.weight_ce = 0.3;
  weighted.weight_dice = 1.7;
  weighted.smooth = 1.0;
  all.push_back(weighted);
  return all;
}

std::string describe_loss(const LossOptions& o) {
  return std::string("batch dice ") + (o.batch_dice ? "on" : "off") + ", background " +
         (o.include_background ? "in" : "out") + ", weights " + std::to_string(o.weight_ce) + " / " +
         std::to_string(o.weight_dice) + ", smooth " + std::to_string(o.smooth);
}

TEST(FusedDiceCe, ClosedFormsGiveTheReferenceLossAndGradient) {
  torch::manual_seed(5);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  // Class 3 absent from the target: its Dice has T = 0, its gradient only the predicted sum's.
  auto target = torch::randint(0, 3, {2, 1, 3, 4, 5}, torch::kLong);
  const auto values = torch::randn({2, 4, 3, 4, 5}, opts) * 2;
  for (const auto& o : loss_settings()) {
    SCOPED_TRACE(describe_loss(o));
    auto logits = values.clone().requires_grad_();
    const auto reference = dice_ce_loss(logits, target, o);
    const auto upstream = torch::full({}, 0.7, opts);
    reference.backward(upstream);
    const auto sums = sums_by_aten(values, target);
    const int64_t voxels = 3 * 4 * 5;
    // The reference computes in float32 whatever the logits' dtype: float32 rounding apart.
    EXPECT_NEAR(kernels::dice_ce_loss_from_sums(sums, dice_ce_spec(o), voxels).item<double>(), reference.item<double>(),
                1e-6);
    const auto coef = kernels::dice_ce_coefficients(sums, dice_ce_spec(o), voxels, upstream);
    ASSERT_EQ(coef.sizes(), (std::vector<int64_t>{2, 9}));
    const auto grad = gradient_by_aten(values, target, coef);
    const double largest = logits.grad().abs().max().item<double>();
    EXPECT_LT((grad - logits.grad()).abs().max().item<double>(), 1e-5 * largest)
        << "differs by up to " << (grad - logits.grad()).abs().max().item<double>() << " of " << largest;
  }
}

TEST(FusedDiceCe, NeverRunsOnCpuTensorsOrWithoutTheFusedMode) {
  const auto logits = torch::randn({1, 3, 4, 4, 4});
  const auto target = torch::zeros({1, 1, 4, 4, 4}, torch::kLong);
  EXPECT_FALSE(kernels::fused_dice_ce_applies(logits, target));
  const kernels::KernelModeGuard aten(kernels::KernelMode::kAten);
  EXPECT_FALSE(kernels::fused_dice_ce_applies(logits, target));
}

// The kernels against the reference, which sees the same rounded logits in float64: the loss and
// the gradient within storage rounding of the gradient's dtype.
TEST(FusedDiceCeCuda, MatchesTheReferenceInEveryDtypeLayoutAndSetting) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  const torch::Device cuda(torch::kCUDA);
  const std::vector<std::vector<int64_t>> shapes = {{2, 14, 9, 10, 11}, {1, 2, 7, 5, 3}, {3, 20, 4, 6, 5},
                                                    {2, 5, 33, 17}};
  int checked = 0;
  for (const auto& shape : shapes) {
    for (const bool cl : {false, true}) {
      for (const auto dtype : {torch::kFloat, torch::kHalf, torch::kBFloat16}) {
        for (const auto& o : loss_settings()) {
          torch::manual_seed(checked);
          auto target_shape = shape;
          target_shape[1] = 1;
          const auto target = torch::randint(0, shape[1], target_shape, torch::kLong).to(cuda);
          const auto format = shape.size() == 5 ? c10::MemoryFormat::ChannelsLast3d : c10::MemoryFormat::ChannelsLast;
          const auto values = (torch::randn(shape) * 3).to(cuda).to(dtype);
          auto fused = (cl ? values.contiguous(format) : values.contiguous()).detach().requires_grad_();
          ASSERT_TRUE(kernels::fused_dice_ce_applies(fused, target));
          auto reference = values.to(torch::kDouble).detach().requires_grad_();
          const auto want = [&] {
            const kernels::KernelModeGuard aten(kernels::KernelMode::kAten);
            return dice_ce_loss(reference, target, o);
          }();
          const auto got = dice_ce_loss(fused, target, o);
          EXPECT_EQ(got.scalar_type(), torch::kFloat);
          want.backward();
          got.backward();
          const std::string what = describe_loss(o) + ", " + c10::toString(dtype) + (cl ? ", channels-last" : "") +
                                   ", classes " + std::to_string(shape[1]);
          EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-4 * (1 + std::abs(want.item<double>()))) << what;
          const auto& g = fused.grad();
          EXPECT_EQ(g.scalar_type(), dtype) << what;
          EXPECT_EQ(g.strides(), fused.strides()) << what;
          const double scale = reference.grad().abs().max().item<double>();
          const double tol = dtype == torch::kFloat ? 1e-5 : dtype == torch::kHalf ? 2e-3 : 1e-2;
          EXPECT_LT((g.to(torch::kDouble) - reference.grad()).abs().max().item<double>(), tol * scale) << what;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 4 * 2 * 3 * 5);
}

// Past the kernels' 32 classes, or for a layout they do not read, the reference runs.
TEST(FusedDiceCeCuda, FallsBackBeyondWhatTheKernelsTake) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  const torch::Device cuda(torch::kCUDA);
  const auto target = torch::zeros({1, 1, 4, 4, 4}, torch::TensorOptions(torch::kLong).device(cuda));
  EXPECT_FALSE(kernels::fused_dice_ce_applies(torch::randn({1, 33, 4, 4, 4}, cuda), target));
  EXPECT_FALSE(kernels::fused_dice_ce_applies(torch::randn({1, 4, 4, 4, 8}, cuda).narrow(4, 0, 4), target));
  EXPECT_TRUE(kernels::fused_dice_ce_applies(torch::randn({1, 4, 4, 4, 4}, cuda), target));
}

// What stays allocated between forward and backward: the ATen loss keeps float32 softmax and
// log-softmax outputs and a one-hot target (about 9 bytes per score); the fused one per-sample sums.
TEST(FusedDiceCeCuda, KeepsOnlyPerSampleSumsForBackward) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  const torch::Device cuda(torch::kCUDA);
  const auto target = torch::randint(0, 14, {2, 1, 32, 32, 32}, torch::kLong).to(cuda);
  const auto logits = torch::randn({2, 14, 32, 32, 32}, torch::TensorOptions(torch::kHalf).device(cuda))
                          .requires_grad_();
  const int64_t scores = 2 * 14 * 32 * 32 * 32;
  std::vector<int64_t> kept;
  for (const auto mode : {kernels::KernelMode::kAten, kernels::KernelMode::kFused}) {
    const kernels::KernelModeGuard guard(mode);
    torch::cuda::synchronize();
    const auto before = static_cast<int64_t>(memory::current_allocated_bytes(cuda));
    auto loss = dice_ce_loss(logits, target, LossOptions{});
    torch::cuda::synchronize();
    kept.push_back(static_cast<int64_t>(memory::current_allocated_bytes(cuda)) - before);
    loss.backward();
  }
  EXPECT_GT(kept[0], 8 * scores) << "the reference";
  EXPECT_LT(kept[1], scores / 8) << "fused";
}

}  // namespace
}  // namespace voxfit::train
