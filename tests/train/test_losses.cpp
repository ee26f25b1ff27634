#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "voxfit/train/losses.h"

namespace voxfit::train {
namespace {

// logits [B=1, K=2, 2 voxels], uniform: softmax 0.5 everywhere; target: voxel 0 background, voxel 1 class 1.
torch::Tensor uniform_logits(int64_t batch = 1) { return torch::zeros({batch, 2, 2}); }

TEST(Losses, UniformPredictionHandComputed) {
  const auto target = torch::tensor({0, 1}, torch::kLong).view({1, 1, 2});
  LossOptions o;
  // class 1: intersect 0.5, sum_pred 1, sum_gt 1 -> (1 + s) / (2 + s)
  const double s = o.smooth;
  const double dice1 = (1.0 + s) / (2.0 + s);
  EXPECT_NEAR(soft_dice_loss(uniform_logits(), target, o).item<double>(), -dice1, 1e-6);
  EXPECT_NEAR(dice_ce_loss(uniform_logits(), target, o).item<double>(), std::log(2.0) - dice1, 1e-6);
  o.include_background = true;  // class 0 has the same numbers
  EXPECT_NEAR(soft_dice_loss(uniform_logits(), target, o).item<double>(), -dice1, 1e-6);
}

TEST(Losses, ConfidentCorrectPredictionIsNearMinusOne) {
  const auto target = torch::tensor({0, 1}, torch::kLong).view({1, 1, 2});
  const auto logits = torch::tensor({20.f, -20.f, -20.f, 20.f}).view({1, 2, 2});
  LossOptions o;
  EXPECT_NEAR(dice_ce_loss(logits, target, o).item<double>(), -1.0, 1e-5);
  const auto wrong = -logits;
  EXPECT_GT(dice_ce_loss(wrong, target, o).item<double>(), 39.0);  // CE ~ 40, Dice ~ 0
}

TEST(Losses, BatchDiceDiffersFromPerSampleDiceAsHandComputed) {
  // sample 0: [0, 1]; sample 1: [0, 0] (no foreground)
  const auto target = torch::tensor({0, 1, 0, 0}, torch::kLong).view({2, 1, 2});
  LossOptions o;
  const double s = o.smooth;
  const double per_sample = ((1.0 + s) / (2.0 + s) + s / (1.0 + s)) / 2.0;
  EXPECT_NEAR(soft_dice_loss(uniform_logits(2), target, o).item<double>(), -per_sample, 1e-6);
  o.batch_dice = true;  // intersect 0.5, sum_pred 2, sum_gt 1
  EXPECT_NEAR(soft_dice_loss(uniform_logits(2), target, o).item<double>(), -(1.0 + s) / (3.0 + s), 1e-6);
}

TEST(Losses, HalfLogitsGiveAFloat32Loss) {
  const auto target = torch::tensor({0, 1}, torch::kLong).view({1, 1, 2});
  const auto loss = dice_ce_loss(uniform_logits().to(torch::kBFloat16), target, LossOptions{});
  EXPECT_EQ(loss.scalar_type(), torch::kFloat);
}

TEST(Losses, DeepSupervisionWeightsAreNnUNets) {
  const auto w3 = deep_supervision_weights(3);
  ASSERT_EQ(w3.size(), 3u);
  EXPECT_NEAR(w3[0], 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(w3[1], 1.0 / 3.0, 1e-12);
  EXPECT_EQ(w3[2], 0.0);
  EXPECT_EQ(deep_supervision_weights(1), std::vector<double>{1.0});
  const auto w5 = deep_supervision_weights(5);
  EXPECT_NEAR(w5[3], 0.125 / 1.875, 1e-12);
}

TEST(Losses, DeepSupervisionCombinesResizedTargets) {
  torch::manual_seed(0);
  const auto target = torch::randint(0, 3, {2, 1, 8, 8, 8}, torch::kLong);
  const auto full = torch::randn({2, 3, 8, 8, 8});
  const auto half = torch::randn({2, 3, 4, 4, 4});
  const auto quarter = torch::randn({2, 3, 2, 2, 2});
  LossOptions o;
  const auto half_target =
      target.index({torch::indexing::Slice(), torch::indexing::Slice(), torch::indexing::Slice(0, 8, 2),
                    torch::indexing::Slice(0, 8, 2), torch::indexing::Slice(0, 8, 2)});
  const double expected = 2.0 / 3.0 * dice_ce_loss(full, target, o).item<double>() +
                          1.0 / 3.0 * dice_ce_loss(half, half_target, o).item<double>();
  EXPECT_NEAR(deep_supervision_loss({full, half, quarter}, target, o).item<double>(), expected, 1e-5);
}

}  // namespace
}  // namespace voxfit::train
