// Real training steps (Conv3d net, cross-entropy, AdamW) under the CPU budget: the allocator, the
// tracker and the OOM recovery as the max-batch search uses them.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "voxfit/core/units.h"
#include "voxfit/memory/cpu_budget.h"
#include "voxfit/memory/memory_tracker.h"
#include "voxfit/memory/oom.h"

namespace voxfit::memory {
namespace {

constexpr int64_t kSide = 16;

struct TinyNetImpl : torch::nn::Module {
  TinyNetImpl()
      : c1(register_module("c1", torch::nn::Conv3d(torch::nn::Conv3dOptions(1, 8, 3).padding(1)))),
        c2(register_module("c2", torch::nn::Conv3d(torch::nn::Conv3dOptions(8, 8, 3).padding(1)))),
        head(register_module("head", torch::nn::Conv3d(torch::nn::Conv3dOptions(8, 2, 1)))) {}
  torch::Tensor forward(const torch::Tensor& x) { return head(torch::relu(c2(torch::relu(c1(x))))); }
  torch::nn::Conv3d c1, c2, head;
};
TORCH_MODULE(TinyNet);

// The model, its optimiser and what the tracker should count as static, built inside a budget.
struct Trainee {
  TinyNet net;
  torch::optim::AdamW opt;
  Trainee() : net(), opt(net->parameters(), torch::optim::AdamWOptions(1e-3)) {}

  std::vector<at::Tensor> params() const { return net->parameters(); }
  std::vector<at::Tensor> grads() const {
    std::vector<at::Tensor> out;
    for (const auto& p : net->parameters()) out.push_back(p.grad());
    return out;
  }
  // Zeroes the gradients in place, as 1.13's zero_grad() does; 2.x's frees them, which would
  // make the static part and the baseline differ between the two LibTorch versions.
  void zero_grads() {
    for (auto& p : net->parameters())
      if (p.grad().defined()) p.grad().zero_();
  }
  std::vector<at::Tensor> optimizer_state() {
    std::vector<at::Tensor> out;
    for (auto& entry : opt.state()) {
      auto& s = static_cast<torch::optim::AdamWParamState&>(*entry.second);
      out.push_back(s.exp_avg());
      out.push_back(s.exp_avg_sq());
    }
    return out;
  }
};

void train_step(Trainee& t, MemoryTracker* tracker, int64_t batch) {
  const auto x = torch::randn({batch, 1, kSide, kSide, kSide});
  const auto y = torch::randint(0, 2, {batch, kSide, kSide, kSide}, torch::kLong);
  torch::Tensor loss;
  {
    auto phase = tracker ? std::optional(tracker->phase(Phase::Forward)) : std::nullopt;
    loss = torch::nn::functional::cross_entropy(t.net->forward(x), y);
  }
  {
    auto phase = tracker ? std::optional(tracker->phase(Phase::Backward)) : std::nullopt;
    loss.backward();
  }
  {
    auto phase = tracker ? std::optional(tracker->phase(Phase::OptimizerStep)) : std::nullopt;
    t.opt.step();
    t.zero_grads();
  }
}

TEST(TrainingMemory, LooseCapTrainsAndPhasePeaksAreSensible) {
  const ScopedCpuBudget budget(256 * kMiB);
  Trainee t;
  MemoryTracker tracker(torch::kCPU);
  tracker.reset();
  for (int step = 0; step < 2; ++step) train_step(t, &tracker, 4);
  tracker.set_static_tensors(t.params(), t.grads(), t.optimizer_state());
  const MemoryProfile p = tracker.profile();

  // c1: 8*1*27 + 8, c2: 8*8*27 + 8, head: 2*8 + 2 floats.
  const std::uint64_t param_bytes = (8 * 27 + 8 + 8 * 8 * 27 + 8 + 2 * 8 + 2) * 4;
  EXPECT_EQ(p.static_bytes.parameters, param_bytes);
  EXPECT_EQ(p.static_bytes.gradients, param_bytes);  // kept (zeroed in place) between steps
  EXPECT_EQ(p.static_bytes.optimizer_state, 2 * param_bytes);
  EXPECT_EQ(p.baseline_allocated, param_bytes);

  const PhasePeak& fwd = p.phase(Phase::Forward);
  const PhasePeak& bwd = p.phase(Phase::Backward);
  const PhasePeak& step = p.phase(Phase::OptimizerStep);
  // Forward keeps the input and three 8-channel activations alive at batch 4.
  const std::uint64_t activation = 4 * 8 * kSide * kSide * kSide * 4;
  EXPECT_GE(fwd.allocated, p.static_bytes.total() + 2 * activation);
  EXPECT_GE(bwd.allocated, p.static_bytes.total());
  EXPECT_GE(step.allocated, p.static_bytes.total());
  EXPECT_GT(bwd.allocated, step.allocated) << "backward holds activations and their gradients";
  EXPECT_EQ(p.peak_allocated, std::max({fwd.allocated, bwd.allocated, step.allocated}));
  EXPECT_EQ(p.peak_reserved, p.peak_allocated);
  EXPECT_EQ(p.fragmentation_bytes, 0u);
  EXPECT_LE(p.peak_allocated, 256 * kMiB);
  EXPECT_EQ(p.ooms, 0u);
  EXPECT_EQ(p.to_json()["phases"]["backward"]["peak_allocated"].get<std::uint64_t>(), bwd.allocated);
}

TEST(TrainingMemory, TightCapRunsOutOfMemory) {
  const ScopedCpuBudget budget(kMiB);
  Trainee t;
  MemoryTracker tracker(torch::kCPU);
  tracker.reset();
  EXPECT_THROW(train_step(t, &tracker, 4), c10::OutOfMemoryError);
  EXPECT_EQ(tracker.profile().ooms, 1u);
  EXPECT_LE(tracker.profile().peak_allocated, kMiB);
}

// The search's inner loop: a batch that does not fit, caught, recovered, again; nothing of the
// failed attempts may stay alive (issue 6 item 3, issue 10 item 5).
TEST(TrainingMemory, FiftyForcedOomsLeaveAllocatedBytesAtBaseline) {
  const ScopedCpuBudget budget(48 * kMiB);
  Trainee t;
  train_step(t, nullptr, 1);  // gradients and optimiser state exist from here on
  MemoryTracker tracker(torch::kCPU);
  tracker.reset();
  const std::uint64_t baseline = current_allocated_bytes(torch::kCPU);
  EXPECT_EQ(baseline, storage_bytes(t.params()) + storage_bytes(t.grads()) + storage_bytes(t.optimizer_state()));
  for (int i = 0; i < 50; ++i) {
    // Batch 512 runs out at the first activation (64 MiB); batch 64 later, with activations of
    // 8 MiB a layer already kept for backward.
    const int64_t batch = i % 2 == 0 ? 512 : 64;
    try {
      train_step(t, &tracker, batch);
      FAIL() << "batch " << batch << " fitted in 48 MiB";
    } catch (const std::exception& e) {
      ASSERT_TRUE(is_oom(e)) << e.what();
    }
    // What the search does after an OOM: reset what a failed backward may have accumulated
    // into the gradients, then recover.
    t.zero_grads();
    recover_after_oom(torch::kCPU);
    ASSERT_EQ(current_allocated_bytes(torch::kCPU), baseline) << "after forced OOM " << i + 1;
  }
  EXPECT_EQ(budget.stats().ooms, 50u);
  EXPECT_NO_THROW(train_step(t, nullptr, 2)) << "a batch that fits still trains after the OOMs";
  EXPECT_EQ(current_allocated_bytes(torch::kCPU), baseline);
}

}  // namespace
}  // namespace voxfit::memory
