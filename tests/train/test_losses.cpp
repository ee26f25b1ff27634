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

// Channels-last logits (a channels-last network's output) take the classes-last path: the same
// loss and gradient as the NCDHW reference, and the gradient keeps the logits' layout (no
// permuting copy back).
TEST(Losses, ChannelsLastLogitsGiveTheSameLossAndGradient) {
  torch::manual_seed(0);
  const auto target = torch::randint(0, 4, {2, 1, 3, 4, 5}, torch::kLong);
  const auto values = torch::randn({2, 4, 3, 4, 5});
  for (const bool batch_dice : {false, true}) {
    for (const bool background : {false, true}) {
      LossOptions o;
      o.batch_dice = batch_dice;
      o.include_background = background;
      auto ref = values.clone().requires_grad_();
      auto cl = values.contiguous(torch::MemoryFormat::ChannelsLast3d).requires_grad_();
      ASSERT_FALSE(cl.is_contiguous());
      const auto loss_ref = dice_ce_loss(ref, target, o);
      const auto loss_cl = dice_ce_loss(cl, target, o);
      loss_ref.backward();
      loss_cl.backward();
      EXPECT_NEAR(loss_cl.item<double>(), loss_ref.item<double>(), 1e-6) << batch_dice << background;
      EXPECT_TRUE(torch::allclose(cl.grad(), ref.grad(), 1e-5, 1e-7)) << batch_dice << background;
      EXPECT_TRUE(cl.grad().is_contiguous(torch::MemoryFormat::ChannelsLast3d));
      EXPECT_NEAR(soft_dice_loss(cl, target, o).item<double>(), soft_dice_loss(ref, target, o).item<double>(), 1e-6);
    }
  }
}

}  // namespace
}  // namespace voxfit::train
