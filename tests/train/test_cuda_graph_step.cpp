// TrainStep's CUDA graph (StepOptions::cuda_graph): replaying the captured forward, backward, loss
// scaling and AdamW trains as the eager steps do, with the learning-rate schedule followed, on a
// CUDA build with a GPU (skipped elsewhere with the reason); a step that cannot be captured (CPU,
// SGD) stays eager.
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

Trace train(torch::Device device, Precision precision, bool cuda_graph, int steps) {
  torch::manual_seed(3);
  StepOptions so;
  so.precision = precision;
  so.optimizer = OptimizerOptions::defaults_for(OptimizerKind::kAdamW);
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

TEST(CudaGraphStep, ReplayedStepsTrainAsEagerStepsDo) {
  if (!graph_capable_gpu()) GTEST_SKIP() << "needs a CUDA build on LibTorch >= 2.2 and a GPU";
  for (const auto precision : {Precision::kFp32, Precision::kFp16}) {
    SCOPED_TRACE(to_string(precision));
    const auto eager = train(torch::kCUDA, precision, false, 10);
    const auto eager2 = train(torch::kCUDA, precision, false, 10);  // the GPU's run-to-run spread
    const auto graph = train(torch::kCUDA, precision, true, 10);
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
    std::cout << "[ " << to_string(precision) << " ] graph vs eager: loss " << loss_gap(graph) << ", weights "
              << weight_gap(graph) << "; eager vs eager: loss " << loss_gap(eager2) << ", weights "
              << weight_gap(eager2) << "; largest weight change " << graph.moved << "\n";
    EXPECT_LT(loss_gap(graph), std::max(loss_floor, 4 * loss_gap(eager2)));
    const double worst = weight_gap(graph);
    EXPECT_LT(worst, std::max(weight_floor, 4 * weight_gap(eager2)));
  }
}

TEST(CudaGraphStep, ACpuStepNeverCaptures) {
  const auto t = train(torch::kCPU, Precision::kFp32, true, 5);
  EXPECT_FALSE(t.graphed);
  for (double l : t.losses) EXPECT_TRUE(std::isfinite(l));
}

}  // namespace
}  // namespace voxfit::train
