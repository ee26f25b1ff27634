#include <gtest/gtest.h>
#include <torch/torch.h>

#include "voxfit/core/error.h"
#include "voxfit/train/lr_schedule.h"
#include "voxfit/train/optimizer.h"
#include "voxfit/train/precision.h"

namespace voxfit::train {
namespace {

// Runs `steps` updates with the same gradients through voxfit's optimiser and LibTorch's.
template <typename TorchOpt, typename TorchOptions>
void expect_same_as_libtorch(OptimizerOptions mine, TorchOptions theirs, int steps) {
  torch::manual_seed(1);
  auto a = torch::randn({4, 5}).requires_grad_(true);
  auto b = a.detach().clone().requires_grad_(true);
  Optimizer opt({a}, mine);
  TorchOpt ref(std::vector<torch::Tensor>{b}, theirs);
  for (int s = 0; s < steps; ++s) {
    const auto g = torch::randn({4, 5});
    a.mutable_grad() = g.clone();
    b.mutable_grad() = g.clone();
    opt.step(mine.lr);
    ref.step();
  }
  EXPECT_TRUE(torch::allclose(a, b, 1e-6, 1e-7)) << (a - b).abs().max().item<double>();
}

TEST(Optimizer, AdamWMatchesLibTorch) {
  auto o = OptimizerOptions::defaults_for(OptimizerKind::kAdamW);
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  expect_same_as_libtorch<torch::optim::AdamW>(o, torch::optim::AdamWOptions(1e-2).weight_decay(0.1), 5);
}

TEST(Optimizer, SgdNesterovMatchesLibTorch) {
  const auto o = OptimizerOptions::defaults_for(OptimizerKind::kSgd);
  expect_same_as_libtorch<torch::optim::SGD>(
      o, torch::optim::SGDOptions(1e-2).momentum(0.99).nesterov(true).weight_decay(3e-5), 5);
}

TEST(Optimizer, SkipsTheStepWhenFoundInf) {
  auto p = torch::ones({3}).requires_grad_(true);
  Optimizer opt({p}, OptimizerOptions{});
  p.mutable_grad() = torch::ones({3});
  opt.step(0.1, torch::ones({1}));
  EXPECT_TRUE(torch::equal(p, torch::ones({3})));
  opt.step(0.1, torch::zeros({1}));
  EXPECT_FALSE(torch::equal(p, torch::ones({3})));
}

TEST(Optimizer, ClipsTheGlobalNorm) {
  auto o = OptimizerOptions::defaults_for(OptimizerKind::kSgd);
  auto p = torch::zeros({2}).requires_grad_(true), q = torch::zeros({1}).requires_grad_(true);
  Optimizer opt({p, q}, o);
  p.mutable_grad() = torch::tensor({30.0f, 40.0f});  // global norm 50 -> scaled to 12
  q.mutable_grad() = torch::tensor({0.0f});
  opt.clip_gradients();
  EXPECT_NEAR(p.grad().norm().item<double>(), 12.0, 1e-3);
}

TEST(Optimizer, StateRoundTripsAndRejectsMismatch) {
  auto p = torch::randn({3}).requires_grad_(true);
  Optimizer a({p}, OptimizerOptions{});
  p.mutable_grad() = torch::ones({3});
  a.step(1e-3);
  auto q = torch::randn({3}).requires_grad_(true);
  Optimizer b({q}, OptimizerOptions{});
  b.load_state(a.state());
  EXPECT_TRUE(torch::equal(a.state()[1].second, b.state()[1].second));
  auto r = torch::randn({4}).requires_grad_(true);
  Optimizer c({r}, OptimizerOptions{});
  EXPECT_ANY_THROW(c.load_state(a.state()));
}

TEST(Schedule, PolyAndCosine) {
  ScheduleOptions poly;
  EXPECT_DOUBLE_EQ(lr_at(0, 100, 1e-2, poly), 1e-2);
  EXPECT_NEAR(lr_at(50, 100, 1e-2, poly), 1e-2 * std::pow(0.5, 0.9), 1e-12);
  EXPECT_DOUBLE_EQ(lr_at(100, 100, 1e-2, poly), 0.0);
  ScheduleOptions cos{ScheduleKind::kCosine, 0.9, 10};
  EXPECT_NEAR(lr_at(0, 110, 1.0, cos), 0.1, 1e-12);  // warm-up
  EXPECT_NEAR(lr_at(9, 110, 1.0, cos), 1.0, 1e-12);
  EXPECT_NEAR(lr_at(60, 110, 1.0, cos), 0.5, 1e-12);  // half way through the decay
  EXPECT_NEAR(lr_at(110, 110, 1.0, cos), 0.0, 1e-12);
}

}  // namespace
// One precision vocabulary: voxfit's, PyTorch's dtype names and Lightning's mixed-precision names.
TEST(Precision, ParsesEveryUsersSpelling) {
  EXPECT_EQ(parse_precision("16-mixed"), Precision::kFp16);
  EXPECT_EQ(parse_precision("float16"), Precision::kFp16);
  EXPECT_EQ(parse_precision("bf16-mixed"), Precision::kBf16);
  EXPECT_EQ(parse_precision("32-true"), Precision::kFp32);
  EXPECT_EQ(parse_precision("tf32"), Precision::kTf32);
  EXPECT_THROW(parse_precision("fp8"), ConfigError);
}

}  // namespace voxfit::train
