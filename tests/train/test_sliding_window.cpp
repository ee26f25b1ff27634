#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

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
  EXPECT_DOUBLE_EQ(d[0], 2.0 * 1 / (1 + 2));   // class 1
  EXPECT_DOUBLE_EQ(d[1], 2.0 * 2 / (3 + 3));   // class 2
  EXPECT_TRUE(std::isnan(d[2]));               // class 3 absent from both
  EXPECT_DOUBLE_EQ(nan_mean(d), (2.0 / 3 + 2.0 / 3) / 2);
}

}  // namespace
}  // namespace voxfit::train
