// TrainStep's CUDA graph (StepOptions::cuda_graph): replaying the captured forward, backward, loss
// scaling, clipping and AdamW or nnU-Net's SGD trains as the eager steps do, with the learning-rate
// schedule followed, on a CUDA build with a GPU (skipped elsewhere with the reason); a step that
// cannot be captured (the CPU) stays eager. And the fused SGD the graph captures against the
// reference update, on the GPU.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <iostream>
#include <vector>

#include "voxfit/core/torch_compat.h"
#include "voxfit/models/network.h"
#include "voxfit/train/train_step.h"

namespace voxfit::train {
namespace {

bool graph_capable_gpu() {
#if defined(VOXFIT_WITH_CUDA)
  return compat::kFusedAdamwTensorLr && torch::cuda::is_available();
#else
  return false;
#endif
}

models::ModelContext small_unet3d() {
  models::ModelContext ctx;
  ctx.patch = {32, 32, 32};
  ctx.num_classes = 3;
  ctx.params = {{"stages", "4"}, {"base_features", "8"}, {"max_features", "64"}};
  return ctx;
}

// A batch of step i: a function of i alone, on the host as the loader gives it.
data::Batch batch_at(int64_t i) {
  auto gen = torch::make_generator<at::CPUGeneratorImpl>(1000 + i);
  auto image = torch::randn({2, 1, 32, 32, 32}, gen);
  auto label = torch::randint(0, 3, {2, 1, 32, 32, 32}, gen, torch::kLong);
  return {image, label};
}

struct Trace {
  std::vector<double> losses;
  std::vector<torch::Tensor> weights;
  double moved = 0;  ///< the largest change of a weight over the run
  bool graphed = false;
};

Trace train(torch::Device device, Precision precision, bool cuda_graph, int steps,
            OptimizerKind optimizer = OptimizerKind::kAdamW) {
  torch::manual_seed(3);
  StepOptions so;
  so.precision = precision;
  so.optimizer = OptimizerOptions::defaults_for(optimizer);
  so.optimizer.lr = 1e-3;
  so.optimizer.clip_grad_norm = 1.0;  // clipping inside the graph too
  // Adam divides by sqrt(v): a parameter whose true gradient is zero (a convolution bias before
  // instance norm) gets rounding noise of 1e-9 turned into full +-lr steps, different in every run
  // on the GPU. A larger eps keeps that amplifier out of a comparison of the graph's mechanics.
  so.optimizer.eps = 1e-3;
  so.spatial_augment.reset();
  so.cuda_graph = cuda_graph;
  TrainStep step(models::make_model("unet3d", small_unet3d()), device, so);
  std::vector<torch::Tensor> initial;
  for (const auto& p : step.network().parameters()) initial.push_back(p.detach().to(torch::kCPU, torch::kFloat));
  Trace t;
  std::vector<StepOutput> outs;
  for (int i = 0; i < steps; ++i)  // a falling learning rate: the graph must read each step's
    outs.push_back(step.run(batch_at(i), 1e-3 * (1.0 - 0.05 * i), i));
  for (const auto& o : outs) t.losses.push_back(o.loss.item<double>());
  for (const auto& p : step.network().parameters()) t.weights.push_back(p.detach().to(torch::kCPU, torch::kFloat));
  for (size_t i = 0; i < initial.size(); ++i)
    t.moved = std::max(t.moved, (t.weights[i] - initial[i]).abs().max().item<double>());
  t.graphed = step.graphed();
  return t;
}

void expect_graph_trains_as_eager(OptimizerKind optimizer) {
  for (const auto precision : {Precision::kFp32, Precision::kFp16}) {
    SCOPED_TRACE(to_string(precision) + " " + to_string(optimizer));
    const auto eager = train(torch::kCUDA, precision, false, 10, optimizer);
    const auto eager2 = train(torch::kCUDA, precision, false, 10, optimizer);  // the GPU's run-to-run spread
    const auto graph = train(torch::kCUDA, precision, true, 10, optimizer);
    EXPECT_FALSE(eager.graphed);
    EXPECT_TRUE(graph.graphed);
    EXPECT_GT(graph.moved, 1e-3);  // it trained: no run of skipped (overflowed) steps passes as equal
    ASSERT_EQ(eager.losses.size(), graph.losses.size());
    const auto loss_gap = [&](const Trace& t) {
      double g = 0;
      for (size_t i = 0; i < eager.losses.size(); ++i)
        g = std::max(g, std::abs(t.losses[i] - eager.losses[i]) / std::max(1.0, std::abs(eager.losses[i])));
      return g;
    };
    const auto weight_gap = [&](const Trace& t) {
      double g = 0;
      for (size_t i = 0; i < eager.weights.size(); ++i)
        g = std::max(g, (t.weights[i] - eager.weights[i]).abs().max().item<double>());
      return g;
    };
    // The same kernels on the same inputs, so equal up to the order of cuDNN's and the reductions'
    // floating-point sums (float32 here is strict: TF32 off): within a floor, or within a few times
    // the spread of two eager runs where that is larger.
    const double loss_floor = precision == Precision::kFp32 ? 1e-4 : 2e-3;
    const double weight_floor = precision == Precision::kFp32 ? 1e-4 : 1e-3;
    std::cout << "[ " << to_string(precision) << " " << to_string(optimizer) << " ] graph vs eager: loss " << loss_gap(graph) << ", weights "
              << weight_gap(graph) << "; eager vs eager: loss " << loss_gap(eager2) << ", weights "
              << weight_gap(eager2) << "; largest weight change " << graph.moved << "\n";
    EXPECT_LT(loss_gap(graph), std::max(loss_floor, 4 * loss_gap(eager2)));
    const double worst = weight_gap(graph);
    EXPECT_LT(worst, std::max(weight_floor, 4 * weight_gap(eager2)));
  }
}

TEST(CudaGraphStep, ReplayedStepsTrainAsEagerStepsDo) {
  if (!graph_capable_gpu()) GTEST_SKIP() << "needs a CUDA build on LibTorch >= 2.2 and a GPU";
  expect_graph_trains_as_eager(OptimizerKind::kAdamW);
}

TEST(CudaGraphStep, ReplayedSgdStepsTrainAsEagerStepsDo) {
  if (!graph_capable_gpu() || !compat::kHasFusedSgd) GTEST_SKIP() << "needs a CUDA build on LibTorch >= 2.4 and a GPU";
  expect_graph_trains_as_eager(OptimizerKind::kSgd);
}

// The fused SGD (one kernel for all parameters, what the graph captures) against the reference
// update (OptimizerOptions::fused = false, PyTorch's SGD op by op) on the same gradients: the first
// step (the buffer starts at the first gradient), a skipped step (found_inf), clipping, and a
// learning rate given as a device tensor.
TEST(FusedSgd, MatchesTheReferenceUpdateOnTheGpu) {
  if (!graph_capable_gpu() || !compat::kHasFusedSgd) GTEST_SKIP() << "needs a CUDA build on LibTorch >= 2.4 and a GPU";
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(5);
  std::vector<torch::Tensor> a, b;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{7}, {33, 5}, {4, 3, 3, 3, 3}}) {
    a.push_back(torch::randn(shape, cuda).requires_grad_(true));
    b.push_back(a.back().detach().clone().requires_grad_(true));
  }
  auto reference_options = OptimizerOptions::defaults_for(OptimizerKind::kSgd);
  reference_options.fused = false;
  Optimizer fused(a, OptimizerOptions::defaults_for(OptimizerKind::kSgd)), reference(b, reference_options);
  ASSERT_TRUE(fused.fused() && fused.capturable());
  ASSERT_FALSE(reference.fused());
  for (int s = 0; s < 6; ++s) {
    const bool skip = s == 2;
    const auto found_inf = torch::full({1}, skip ? 1.0f : 0.0f, cuda);
    for (size_t i = 0; i < a.size(); ++i) {
      const auto g = 10 * torch::randn(a[i].sizes(), cuda);  // joint norm above 12: clipped
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    fused.clip_gradients();
    reference.clip_gradients();
    const double lr = 1e-2 * (1.0 - 0.1 * s);
    if (s % 2)
      fused.step(torch::full({}, lr, cuda.dtype(torch::kFloat)), found_inf);
    else
      fused.step(lr, found_inf);
    reference.step(lr, found_inf);
  }
  for (size_t i = 0; i < a.size(); ++i) {
    const double gap = (a[i] - b[i]).abs().max().item<double>();
    EXPECT_LT(gap, 1e-6) << "parameter " << i;
  }
  const auto fs = fused.state(), rs = reference.state();
  ASSERT_EQ(fs.size(), rs.size());
  for (size_t i = 0; i < fs.size(); ++i)
    EXPECT_TRUE(torch::allclose(fs[i].second, rs[i].second, 1e-5, 1e-6)) << fs[i].first;
}

TEST(CudaGraphStep, ACpuStepNeverCaptures) {
  const auto t = train(torch::kCPU, Precision::kFp32, true, 5);
  EXPECT_FALSE(t.graphed);
  for (double l : t.losses) EXPECT_TRUE(std::isfinite(l));
}

}  // namespace
}  // namespace voxfit::train
