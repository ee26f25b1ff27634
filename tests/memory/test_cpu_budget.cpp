#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/Allocator.h>
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "support/barrier.h"
#include "voxfit/core/error.h"
#include "voxfit/memory/cpu_budget.h"
#include "voxfit/memory/oom.h"

namespace voxfit::memory {
namespace {

const c10::Device kCpu(c10::kCPU);

at::Tensor floats(int64_t n) { return at::empty({n}, at::kFloat); }

TEST(CpuBudget, ThrowsOutOfMemoryPastTheCapAndNotBelow) {
  const ScopedCpuBudget budget(4096);
  at::Tensor exact = floats(1024);  // 4096 bytes: exactly the cap
  EXPECT_EQ(budget.stats().current_bytes, 4096u);
  EXPECT_THROW(floats(1), c10::OutOfMemoryError);
  exact.reset();
  EXPECT_EQ(budget.stats().current_bytes, 0u);
  try {
    floats(1025);
    FAIL() << "4100 bytes passed a 4096-byte cap";
  } catch (const c10::OutOfMemoryError& e) {
    EXPECT_TRUE(is_oom(e));
    EXPECT_NE(e.msg().find("CPU out of memory"), std::string::npos) << e.msg();
  }
  EXPECT_EQ(budget.stats().ooms, 2u);
  EXPECT_EQ(budget.stats().current_bytes, 0u);
  EXPECT_NO_THROW(floats(1024));
}

TEST(CpuBudget, PeakIsTheLargestSumOfLiveAllocations) {
  const ScopedCpuBudget budget(1 << 20);
  at::Tensor a = floats(1000);  // 4000
  at::Tensor b = floats(2000);  // 8000
  EXPECT_EQ(budget.stats().current_bytes, 12000u);
  a.reset();
  at::Tensor c = floats(500);  // 2000: live 10000, peak still 12000
  EXPECT_EQ(budget.stats().current_bytes, 10000u);
  EXPECT_EQ(budget.stats().peak_bytes, 12000u);
  at::Tensor d = floats(3000);  // 12000: live 22000
  EXPECT_EQ(budget.stats().peak_bytes, 22000u);
  b.reset();
  c.reset();
  d.reset();
  EXPECT_EQ(budget.stats().current_bytes, 0u);
  EXPECT_EQ(budget.stats().peak_bytes, 22000u);
  EXPECT_EQ(budget.stats().allocations, 4u);
  reset_cpu_budget_peak();
  EXPECT_EQ(budget.stats().peak_bytes, 0u);
}

TEST(CpuBudget, TorchOpsAllocateThroughIt) {
  const ScopedCpuBudget budget(64 << 20);
  const at::Tensor x = at::randn({2, 3, 8, 8, 8});
  const at::Tensor w = at::randn({4, 3, 3, 3, 3});
  const at::Tensor y = at::conv3d(x, w);
  const at::Tensor z = (y * 2).sum(1);
  // Temporaries (y * 2, conv workspaces) are gone; what is live is exactly these four tensors.
  const std::uint64_t live = x.nbytes() + w.nbytes() + y.nbytes() + z.nbytes();
  EXPECT_EQ(budget.stats().current_bytes, live);
  EXPECT_GE(budget.stats().peak_bytes, live + y.nbytes());  // y * 2 lived beside y
  EXPECT_GE(budget.stats().allocations, 5u);
}

TEST(CpuBudget, RestoresThePreviousAllocatorAndToleratesTensorsThatOutliveIt) {
  c10::Allocator* const before = c10::GetAllocator(c10::kCPU);
  at::Tensor survivor;
  {
    const ScopedCpuBudget budget(1 << 20);
    EXPECT_NE(c10::GetAllocator(c10::kCPU), before);
    EXPECT_TRUE(active_cpu_budget_stats().has_value());
    survivor = floats(100);
    EXPECT_THROW(ScopedCpuBudget nested(1 << 20), Error);
  }
  EXPECT_EQ(c10::GetAllocator(c10::kCPU), before);
  EXPECT_FALSE(active_cpu_budget_stats().has_value());

  // The storage keeps the budget allocator and calls it again to grow: it must still work, uncapped.
  survivor.resize_({4 << 20});
  survivor.fill_(1.0f);
  EXPECT_FLOAT_EQ(survivor.sum().item<float>(), static_cast<float>(4 << 20));

  // Freeing it under a later budget is not charged to that budget.
  const ScopedCpuBudget later(1 << 20);
  const at::Tensor mine = floats(10);
  survivor.reset();
  EXPECT_EQ(later.stats().current_bytes, 40u);
}

using ::voxfit::test::Barrier;

TEST(CpuBudget, CountsExactlyUnderConcurrentAllocation) {
  // Loader threads and the training thread allocate at the same time; with a cap that some
  // attempts hit, every byte must still be given back and the cap never passed. The cap is reached
  // by construction, not by luck of scheduling: in each round the four threads ask for 3 MiB each
  // against an 8 MiB cap and hold what they got until all have asked (a barrier), so exactly 4 of
  // the 12 one-MiB requests are refused per round, whichever thread loses each race. Between rounds
  // every thread also churns random sizes under the cap, as the loader does.
  const std::uint64_t mib = 1 << 20;
  const std::uint64_t cap = 8 * mib;
  const int threads_n = 4, per_thread = 3, rounds = 100, churn = 20;
  const ScopedCpuBudget budget(cap);
  std::atomic<int> refused{0}, churn_refused{0};
  Barrier barrier(threads_n);
  std::vector<std::thread> threads;
  for (int t = 0; t < threads_n; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::uniform_int_distribution<int64_t> size(1, 100000);
      for (int r = 0; r < rounds; ++r) {
        std::vector<at::Tensor> held;
        for (int i = 0; i < per_thread; ++i) {
          try {
            held.push_back(at::empty({static_cast<int64_t>(mib / sizeof(float))}, at::kFloat));
          } catch (const c10::OutOfMemoryError&) {
            ++refused;
          }
        }
        barrier.arrive_and_wait();  // all twelve requests made while every granted MiB is held
        held.clear();
        barrier.arrive_and_wait();  // all released before the next round's requests
        std::vector<at::Tensor> live;
        for (int i = 0; i < churn; ++i) {
          try {
            live.push_back(at::empty({size(rng)}, at::kFloat));
          } catch (const c10::OutOfMemoryError&) {
            ++churn_refused;
          }
          if (live.size() > 4) live.erase(live.begin());
        }
        live.clear();
        barrier.arrive_and_wait();
      }
    });
  }
  for (auto& th : threads) th.join();
  const CpuAllocatorStats s = budget.stats();
  EXPECT_EQ(s.current_bytes, 0u);
  EXPECT_LE(s.peak_bytes, cap);
  EXPECT_EQ(s.peak_bytes, cap) << "the held rounds fill the cap exactly";
  EXPECT_EQ(refused.load(), rounds * (threads_n * per_thread - static_cast<int>(cap / mib)));
  EXPECT_EQ(churn_refused.load(), 0) << "4 threads x 5 x 400 kB stay under the cap";
  EXPECT_EQ(s.ooms, static_cast<std::uint64_t>(refused.load()));
  EXPECT_EQ(s.allocations + s.ooms, static_cast<std::uint64_t>(threads_n * rounds * (per_thread + churn)));
}

TEST(CpuBudget, IntraOpThreadsAreCounted) {
  at::set_num_threads(2);
  const ScopedCpuBudget budget(256 << 20);
  const at::Tensor x = at::randn({4, 4, 24, 24, 24});
  const at::Tensor w = at::randn({8, 4, 3, 3, 3});
  at::Tensor y = at::conv3d(x, w, {}, {1, 1, 1}, {1, 1, 1});
  at::parallel_for(0, 8, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const at::Tensor tmp = at::empty({1000}, at::kFloat);
    }
  });
  EXPECT_EQ(budget.stats().current_bytes, x.nbytes() + w.nbytes() + y.nbytes());
}

TEST(CpuBudget, ZeroCapIsABudgetError) { EXPECT_THROW(ScopedCpuBudget(0), BudgetError); }

TEST(OomClassification, RecognisesAllocationFailuresOnly) {
  EXPECT_TRUE(is_oom(std::bad_alloc()));
  EXPECT_FALSE(is_oom(std::runtime_error("out of memory")));  // not from LibTorch: not ours to judge
  try {
    TORCH_CHECK(false, "CUDA error: out of memory");
  } catch (const c10::Error& e) {
    EXPECT_TRUE(is_oom(e));
  }
  try {
    TORCH_CHECK(false, "CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)");
  } catch (const c10::Error& e) {
    EXPECT_TRUE(is_oom(e));
  }
  try {
    TORCH_CHECK(false, "shape mismatch");
  } catch (const c10::Error& e) {
    EXPECT_FALSE(is_oom(e));
  }
}

TEST(OomRecovery, CpuResetsThePeakAndReportsCurrentBytes) {
  EXPECT_EQ(current_allocated_bytes(kCpu), 0u);  // no budget: nothing counted
  const ScopedCpuBudget budget(1 << 20);
  const at::Tensor keep = floats(100);
  { const at::Tensor gone = floats(1000); }
  EXPECT_EQ(budget.stats().peak_bytes, 4400u);
  recover_after_oom(kCpu);
  EXPECT_EQ(budget.stats().peak_bytes, 400u);
  EXPECT_EQ(current_allocated_bytes(kCpu), 400u);
}

}  // namespace
}  // namespace voxfit::memory
