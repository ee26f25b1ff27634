#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <limits>

#include "voxfit/train/loss_scaler.h"

namespace voxfit::train {
namespace {

// The CPU path implements GradScaler's rules; the CUDA path calls the fused ops
// (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_): the same cases for both.
void check_grow_and_backoff(torch::Device device) {
  const auto on = [&](torch::Tensor t) { return t.to(device); };
  LossScalerOptions o;
  o.init_scale = 4.0;
  o.growth_interval = 2;
  LossScaler scaler(o, device);
  auto g = on(torch::full({3}, 8.0));

  EXPECT_DOUBLE_EQ(scaler.scale_loss(on(torch::tensor(1.5))).item<double>(), 6.0);
  scaler.unscale({g});
  EXPECT_TRUE(torch::allclose(g.cpu(), torch::full({3}, 2.0)));
  EXPECT_FALSE(scaler.found_inf());
  scaler.update();
  EXPECT_DOUBLE_EQ(scaler.scale(), 4.0);
  EXPECT_EQ(scaler.growth_tracker(), 1);

  scaler.unscale({on(torch::ones({2}))});
  scaler.update();
  EXPECT_DOUBLE_EQ(scaler.scale(), 8.0);  // two clean steps: grown
  EXPECT_EQ(scaler.growth_tracker(), 0);

  auto bad = on(torch::tensor({1.0f, std::numeric_limits<float>::infinity()}));
  scaler.unscale({on(torch::ones({2})), bad});
  EXPECT_TRUE(scaler.found_inf());
  scaler.update();
  EXPECT_DOUBLE_EQ(scaler.scale(), 4.0);  // backed off
  EXPECT_EQ(scaler.growth_tracker(), 0);

  auto nan = on(torch::tensor({std::numeric_limits<float>::quiet_NaN()}));
  scaler.unscale({nan});
  EXPECT_TRUE(scaler.found_inf());
  scaler.unscale({on(torch::ones({1}))});
  EXPECT_FALSE(scaler.found_inf());  // the flag is per step
}

TEST(LossScaler, GrowsAfterTheIntervalAndBacksOffOnInf) { check_grow_and_backoff(torch::kCPU); }

TEST(LossScaler, CudaOpsGrowAndBackOffAlike) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA in this build or machine";
  check_grow_and_backoff(torch::Device(torch::kCUDA, 0));
}

TEST(LossScaler, DisabledIsTheIdentity) {
  LossScalerOptions o;
  o.enabled = false;
  LossScaler scaler(o, torch::kCPU);
  auto g = torch::full({2}, std::numeric_limits<float>::infinity());
  EXPECT_DOUBLE_EQ(scaler.scale_loss(torch::tensor(3.0)).item<double>(), 3.0);
  scaler.unscale({g});
  EXPECT_FALSE(scaler.found_inf());
  scaler.update();
  EXPECT_DOUBLE_EQ(scaler.scale(), 1.0);
}

TEST(LossScaler, StateRoundTrips) {
  LossScalerOptions o;
  o.init_scale = 16.0;
  LossScaler a(o, torch::kCPU), b(LossScalerOptions{}, torch::kCPU);
  a.unscale({torch::ones({1})});
  a.update();
  b.load_state(a.state());
  EXPECT_DOUBLE_EQ(b.scale(), 16.0);
  EXPECT_EQ(b.growth_tracker(), 1);
}

}  // namespace
}  // namespace voxfit::train
