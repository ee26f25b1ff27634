// The loss registry (train/losses.h): every registered loss builds from its entry and gives a
// finite float32 loss and finite gradients on a tiny random batch, alone and through deep
// supervision, and says what it keeps for backward; an unknown name is one ConfigError line that
// lists the known ones. A new loss is covered here by its entry alone.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <set>
#include <string>

#include "voxfit/core/error.h"
#include "voxfit/train/losses.h"

namespace voxfit::train {
namespace {

// A tiny random batch: logits [2, 3, 4, 4, 4] that require a gradient, classes 0..2.
struct RegistryBatch {
  torch::Tensor logits, target;
};

RegistryBatch registry_batch(torch::ScalarType dtype = torch::kFloat) {
  torch::manual_seed(0);
  return {torch::randn({2, 3, 4, 4, 4}, torch::dtype(dtype).requires_grad(true)),
          torch::randint(0, 3, {2, 1, 4, 4, 4}, torch::kLong)};
}

LossOptions options_for(const std::string& name) {
  LossOptions o;
  o.name = name;
  return o;
}

void expect_finite_gradient(const torch::Tensor& x) {
  ASSERT_TRUE(x.grad().defined());
  EXPECT_TRUE(torch::isfinite(x.grad()).all().item<bool>());
  EXPECT_GT(x.grad().abs().sum().item<double>(), 0.0);
}

TEST(LossRegistry, NamesAreUniqueAndTheDefaultIsRegistered) {
  ASSERT_FALSE(loss_registry().empty());
  std::set<std::string> names;
  for (const auto& entry : loss_registry()) {
    EXPECT_FALSE(entry.name.empty());
    EXPECT_FALSE(entry.summary.empty()) << entry.name;
    EXPECT_TRUE(entry.make && entry.saved_for_backward) << entry.name;
    EXPECT_TRUE(names.insert(entry.name).second) << entry.name << " registered twice";
    EXPECT_NE(loss_names().find(entry.name), std::string::npos) << entry.name;
    EXPECT_EQ(&find_loss(entry.name), &entry);
  }
  EXPECT_EQ(find_loss(LossOptions{}.name).name, "dice_ce");
}

TEST(LossRegistry, EveryLossGivesAFiniteLossAndGradient) {
  for (const auto& entry : loss_registry()) {
    SCOPED_TRACE(entry.name);
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      const auto b = registry_batch(dtype);
      const auto loss = make_loss(options_for(entry.name))(b.logits, b.target);
      EXPECT_EQ(loss.dim(), 0);
      EXPECT_EQ(loss.scalar_type(), torch::kFloat);  // whatever the logits' dtype
      EXPECT_TRUE(std::isfinite(loss.item<double>()));
      loss.backward();
      expect_finite_gradient(b.logits);
    }
  }
}

TEST(LossRegistry, EveryLossTrainsThroughDeepSupervision) {
  for (const auto& entry : loss_registry()) {
    SCOPED_TRACE(entry.name);
    const auto b = registry_batch();
    const auto half = torch::randn({2, 3, 2, 2, 2}, torch::requires_grad(true));
    const auto quarter = torch::randn({2, 3, 1, 1, 1}, torch::requires_grad(true));
    const auto loss = deep_supervision_loss({b.logits, half, quarter}, b.target, options_for(entry.name));
    EXPECT_EQ(loss.scalar_type(), torch::kFloat);
    EXPECT_TRUE(std::isfinite(loss.item<double>()));
    loss.backward();
    expect_finite_gradient(b.logits);
    expect_finite_gradient(half);
    EXPECT_FALSE(quarter.grad().defined());  // the lowest resolution has weight 0
  }
}

TEST(LossRegistry, EveryLossSaysWhatItKeepsForBackward) {
  for (const auto& entry : loss_registry()) {
    SCOPED_TRACE(entry.name);
    std::uint64_t kept[2] = {0, 0};
    for (const bool fused : {false, true}) {
      std::uint64_t one = 0, two = 0;
      for (const auto& [dtype, bytes] : entry.saved_for_backward({1, 3, 4, 4, 4}, fused)) one += bytes;
      for (const auto& [dtype, bytes] : entry.saved_for_backward({2, 3, 4, 4, 4}, fused)) two += bytes;
      EXPECT_GT(one, 0u) << "fused " << fused;
      EXPECT_EQ(two, 2 * one) << "fused " << fused;  // per sample
      kept[fused] = one;
    }
    EXPECT_LT(kept[1], kept[0]) << "the fused kernels keep less";
  }
}

TEST(LossRegistry, UnknownNameIsOneLineListingTheKnownOnes) {
  try {
    make_loss(options_for("focal"));
    FAIL() << "an unknown loss was built";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what, "unknown loss 'focal' (known: " + loss_names() + ")");
    EXPECT_EQ(what.find('\n'), std::string::npos);
    for (const auto& entry : loss_registry()) EXPECT_NE(what.find(entry.name), std::string::npos) << entry.name;
  }
  EXPECT_THROW(find_loss(""), ConfigError);
  const auto b = registry_batch();
  EXPECT_THROW(deep_supervision_loss({b.logits}, b.target, options_for("DiceCE")), ConfigError);
}

}  // namespace
}  // namespace voxfit::train
