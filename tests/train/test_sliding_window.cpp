#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "voxfit/memory/budget.h"
#include "voxfit/memory/oom.h"
#include "voxfit/train/sliding_window.h"

namespace voxfit::train {
namespace {

TEST(SlidingWindow, WindowCoveringTheVolumeEqualsADirectForward) {
  torch::manual_seed(0);
  torch::nn::Conv3d net(torch::nn::Conv3dOptions(2, 4, 3).padding(1));
  const auto image = torch::randn({2, 10, 12, 14});
  SlidingWindowOptions o;
  o.patch = {10, 12, 14};
  const auto fn = [&](const torch::Tensor& x) { return net->forward(x); };
  const auto out = sliding_window_inference(image, fn, o);
  torch::NoGradGuard no_grad;
  const auto direct = net->forward(image.unsqueeze(0)).squeeze(0);
  EXPECT_TRUE(torch::allclose(out, direct, 1e-5, 1e-6));
}

TEST(SlidingWindow, OverlappingWindowsOfAPointwiseNetEqualTheDirectForward) {
  // A 1x1x1 convolution has no context, so any tiling must reproduce it exactly.
  torch::manual_seed(0);
  torch::nn::Conv3d net(torch::nn::Conv3dOptions(1, 3, 1));
  const auto image = torch::randn({1, 13, 9, 20});
  const auto fn = [&](const torch::Tensor& x) { return net->forward(x); };
  torch::NoGradGuard no_grad;
  const auto direct = net->forward(image.unsqueeze(0)).squeeze(0);
  for (double overlap : {0.0, 0.25, 0.5}) {
    SlidingWindowOptions o;
    o.patch = {6, 6, 8};
    o.overlap = overlap;
    o.window_batch = 3;
    EXPECT_TRUE(torch::allclose(sliding_window_inference(image, fn, o), direct, 1e-5, 1e-6)) << overlap;
  }
  SlidingWindowOptions big;  // a window larger than the volume: padded, then cropped back
  big.patch = {16, 16, 24};
  EXPECT_TRUE(torch::allclose(sliding_window_inference(image, fn, big), direct, 1e-5, 1e-6));
}

TEST(SlidingWindow, LogitsTooLargeForTheBudgetAreSummedInHostMemory) {
  // 16 classes on a 40^3 volume: 4 MB of summed logits, under a 3 MiB budget that the windows
  // (16^3, two at a time) fit in easily. nnU-Net's fallback: sum in host memory.
  torch::manual_seed(0);
  torch::nn::Conv3d net(torch::nn::Conv3dOptions(1, 16, 3).padding(1));
  const auto image = torch::randn({1, 40, 40, 40});
  const auto fn = [&](const torch::Tensor& x) { return net->forward(x); };
  SlidingWindowOptions o;
  o.patch = {16, 16, 16};
  const auto reference = sliding_window_inference(image, fn, o);

  memory::BudgetSpec budget;
  budget.kind = memory::BudgetKind::Size;
  budget.visible_bytes = 3 * 1024 * 1024;
  memory::ScopedBudget scoped(budget, torch::kCPU);
  const auto baseline = memory::current_allocated_bytes(torch::kCPU);
  EXPECT_THROW(sliding_window_inference(image, fn, o), c10::Error) << "the logits must not fit for this test";
  memory::recover_after_oom(torch::kCPU);
  const auto logits = sliding_window_inference_on(image, torch::kCPU, fn, o);
  EXPECT_TRUE(torch::equal(logits, reference));
  EXPECT_LE(memory::current_allocated_bytes(torch::kCPU), baseline) << "the host buffers are not charged";
}

TEST(SlidingWindow, GaussianIsPeakedAndHasNoZeros) {
  const auto g = gaussian_importance({9, 9, 9}, torch::kCPU);
  EXPECT_FLOAT_EQ(g.max().item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(g[4][4][4].item<float>(), 1.0f);
  EXPECT_GT(g.min().item<float>(), 0.0f);
  EXPECT_LT(g[0][0][0].item<float>(), 1e-3f);
}

TEST(Dice, PerClassHandComputed) {
  const auto truth = torch::tensor({0, 1, 1, 2, 2, 2}, torch::kLong);
  const auto pred = torch::tensor({0, 1, 2, 2, 2, 0}, torch::kLong);
  const auto d = dice_per_class(pred, truth, 4);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_DOUBLE_EQ(d[0], 2.0 * 1 / (1 + 2));  // class 1
  EXPECT_DOUBLE_EQ(d[1], 2.0 * 2 / (3 + 3));  // class 2
  EXPECT_TRUE(std::isnan(d[2]));              // class 3 absent from both
  EXPECT_DOUBLE_EQ(nan_mean(d), (2.0 / 3 + 2.0 / 3) / 2);
}

// The semantics of MONAI's DiceMetric(include_background=False, ignore_empty=True), per class.
TEST(Dice, PerfectPredictionScoresOneAndEmptyPredictionZeroPerClass) {
  const auto truth = torch::tensor({0, 1, 1, 2, 2, 2, 3, 0}, torch::kLong).view({2, 2, 2});
  const auto perfect = dice_per_class(truth.clone(), truth, 4);
  ASSERT_EQ(perfect.size(), 3u);
  for (double d : perfect) EXPECT_DOUBLE_EQ(d, 1.0);
  const auto empty = dice_per_class(torch::zeros_like(truth), truth, 4);
  ASSERT_EQ(empty.size(), 3u);
  for (double d : empty) EXPECT_DOUBLE_EQ(d, 0.0);
  EXPECT_DOUBLE_EQ(nan_mean(perfect), 1.0);
  EXPECT_DOUBLE_EQ(nan_mean(empty), 0.0);
}

TEST(Dice, AClassAbsentFromTheTruthIsLeftOutOfTheMeanWhateverWasPredicted) {
  const auto truth = torch::tensor({0, 0, 1, 1}, torch::kLong);
  // Class 1 half found (Dice 2 * 1 / (1 + 2)); class 2 absent from both; class 3 predicted only.
  const auto pred = torch::tensor({0, 3, 1, 0}, torch::kLong);
  const auto d = dice_per_class(pred, truth, 4);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_DOUBLE_EQ(d[0], 2.0 / 3);
  EXPECT_TRUE(std::isnan(d[1])) << d[1];  // not 1 (ignore_empty=False) and not 0
  EXPECT_TRUE(std::isnan(d[2])) << d[2];  // MONAI: empty truth is NaN; nnU-Net would say 0
  EXPECT_DOUBLE_EQ(nan_mean(d), 2.0 / 3);
  EXPECT_TRUE(std::isnan(nan_mean({std::nan(""), std::nan("")})));
}

// MONAI's reduction "mean": each case's mean over its classes first, then over the cases; the
// per-class values are its "mean_batch". Reduced class-first, the same cases would give 0.5.
TEST(Dice, CasesReduceAsMonaisDiceMetric) {
  const double nan = std::nan("");
  const auto s = summarize_dice({{1.0, nan}, {0.0, 0.5}, {nan, nan}});
  ASSERT_EQ(s.per_class.size(), 2u);
  EXPECT_DOUBLE_EQ(s.per_class[0], 0.5);
  EXPECT_DOUBLE_EQ(s.per_class[1], 0.5);
  EXPECT_DOUBLE_EQ(s.mean, (1.0 + 0.25) / 2);
  EXPECT_TRUE(std::isnan(summarize_dice({{nan, nan}}).mean));
  EXPECT_TRUE(std::isnan(summarize_dice({}).mean));
}

}  // namespace
}  // namespace voxfit::train
