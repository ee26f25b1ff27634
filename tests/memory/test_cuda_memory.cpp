// CUDA-only checks of the budget and the OOM recovery (skipped without a GPU); the vehicle of
// tools/gpu-memory-check.sh, which greps the "[voxfit-gpu]" lines printed here.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>

#include "support/test_support.h"
#include "voxfit/core/error.h"
#include "voxfit/core/runtime.h"
#include "voxfit/core/units.h"
#include "voxfit/memory/budget.h"
#include "voxfit/memory/memory_snapshot.h"
#include "voxfit/memory/memory_tracker.h"
#include "voxfit/memory/oom.h"

namespace voxfit::memory {
namespace {

const c10::Device kGpu(c10::kCUDA, 0);

class CudaMemory : public test::TempDirTest {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA in this build or machine";
    TempDirTest::SetUp();
    table_ = std::make_unique<CardTable>(load_card_table(test::source_dir() / "data" / "cards.csv"));
  }
  std::unique_ptr<CardTable> table_;
};

void print(const std::string& key, const std::string& value) {
  std::printf("[voxfit-gpu] %-28s %s\n", key.c_str(), value.c_str());
  std::fflush(stdout);
}

TEST_F(CudaMemory, ContextOverheadAndCardBudgets) {
  const CudaContextOverhead o = measure_cuda_context_overhead(0);
  print("gpu", cuda_devices().at(0).name);
  print("gpu_total", format_bytes(o.total_bytes) + " (" + std::to_string(o.total_bytes) + " B)");
  print("context_overhead", format_bytes(o.overhead_bytes) + " (" + std::to_string(o.overhead_bytes) + " B)");
  print("allocator_reserved_at_measure", format_bytes(o.allocator_reserved_bytes));
  EXPECT_GT(o.overhead_bytes, 64 * kMiB) << "a CUDA context with cuBLAS and cuDNN costs hundreds of MiB";
  EXPECT_LT(o.overhead_bytes, 4 * kGiB);
  for (const char* id : {"rtx3090", "a40"}) {
    const BudgetReport r = plan_budget(parse_budget("", id, *table_), kGpu);
    print(std::string(id) + "_usable", format_bytes(r.usable_bytes) + " (" + std::to_string(r.usable_bytes) +
                                           " B, fraction " + std::to_string(r.fraction) + ")");
    std::printf("%s\n", r.to_text().c_str());
    EXPECT_EQ(r.usable_bytes, r.visible_bytes - r.overhead_bytes);
    EXPECT_NEAR(r.fraction * static_cast<double>(r.device_total_bytes), static_cast<double>(r.usable_bytes), 1.0);
    // The process's first measurement serves every plan; another one now differs by a few MiB.
    EXPECT_NEAR(static_cast<double>(r.overhead_bytes), static_cast<double>(o.overhead_bytes), 64.0 * kMiB);
    EXPECT_EQ(r.overhead_bytes, cuda_context_overhead(0).overhead_bytes);
  }
  {
    // Kernels loaded later (a float32 convolution of new shapes, cuDNN's benchmark mode) make the
    // overhead measured again grow; the budget of a later plan stays the first one.
    const BudgetReport before = plan_budget(parse_budget("", "rtx3090", *table_), kGpu);
    const auto opts = at::TensorOptions(kGpu);
    const bool benchmark = at::globalContext().benchmarkCuDNN();
    at::globalContext().setBenchmarkCuDNN(true);
    const at::Tensor y = at::conv3d(at::randn({2, 8, 24, 24, 24}, opts), at::randn({16, 8, 5, 5, 5}, opts));
    (void)y.sum().item<float>();
    at::globalContext().setBenchmarkCuDNN(benchmark);
    print("context_overhead_later", format_bytes(measure_cuda_context_overhead(0).overhead_bytes));
    EXPECT_EQ(plan_budget(parse_budget("", "rtx3090", *table_), kGpu).usable_bytes, before.usable_bytes);
  }
  const std::string too_big = std::to_string(o.total_bytes / kGiB + 8) + "GiB";
  EXPECT_THROW(plan_budget(parse_budget(too_big, "", *table_), kGpu), BudgetError);
}

TEST_F(CudaMemory, CardBudgetCapsTheCachingAllocator) {
  const ScopedBudget budget(parse_budget("", "rtx3090", *table_), kGpu);
  recover_after_oom(kGpu);
  const std::uint64_t usable = budget.report().usable_bytes;
  {
    const at::Tensor half = at::empty({static_cast<int64_t>(usable / 2)}, at::TensorOptions(kGpu).dtype(at::kByte));
    EXPECT_GE(current_allocated_bytes(kGpu), usable / 2);
  }
  try {
    const at::Tensor over = at::empty({static_cast<int64_t>(usable + kGiB)}, at::TensorOptions(kGpu).dtype(at::kByte));
    FAIL() << "an allocation of usable + 1 GiB passed the rtx3090 budget";
  } catch (const std::exception& e) {
    EXPECT_TRUE(is_oom(e)) << e.what();
  }
}

TEST_F(CudaMemory, TwoHundredForcedOomsReturnToBaseline) {
  const ScopedBudget budget(parse_budget("", "rtx3090", *table_), kGpu);
  auto net = torch::nn::Sequential(torch::nn::Conv3d(torch::nn::Conv3dOptions(1, 16, 3).padding(1)), torch::nn::ReLU(),
                                   torch::nn::Conv3d(torch::nn::Conv3dOptions(16, 2, 1)));
  net->to(kGpu);
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(1e-3));
  auto step = [&](int64_t batch) {
    const auto x = torch::randn({batch, 1, 96, 96, 96}, kGpu);
    const auto y = torch::randint(0, 2, {batch, 96, 96, 96}, torch::TensorOptions(kGpu).dtype(torch::kLong));
    torch::nn::functional::cross_entropy(net->forward(x), y).backward();
    opt.step();
    opt.zero_grad();
  };
  step(1);
  MemoryTracker tracker(kGpu);
  recover_after_oom(kGpu);
  tracker.reset();
  const std::uint64_t baseline = current_allocated_bytes(kGpu);
  int ooms = 0;
  for (int i = 0; i < 200; ++i) {
    // Batch 512 at 96^3: 1.7 GiB of input fits, 27 GiB of first activations do not.
    try {
      step(512);
    } catch (const std::exception& e) {
      ASSERT_TRUE(is_oom(e)) << e.what();
      ++ooms;
    }
    opt.zero_grad();
    recover_after_oom(kGpu);
    ASSERT_EQ(current_allocated_bytes(kGpu), baseline) << "after forced OOM " << i + 1;
  }
  const MemoryProfile p = tracker.profile();
  print("forced_ooms", std::to_string(ooms) + " of 200");
  print("allocator_oom_count", std::to_string(p.ooms));
  print("baseline_allocated", format_bytes(baseline) + " (" + std::to_string(baseline) + " B)");
  print("allocated_after_ooms", std::to_string(current_allocated_bytes(kGpu)) + " B");
  EXPECT_EQ(ooms, 200);
  EXPECT_GE(p.ooms, 200u);
  EXPECT_LE(p.peak_reserved, budget.report().usable_bytes);
  EXPECT_NO_THROW(step(2));
}

TEST_F(CudaMemory, SnapshotIsAPickle) {
  if (!MemoryHistoryRecorder::available()) GTEST_SKIP() << "LibTorch < 2.1: no allocator history";
  const auto file = dir() / "snapshot.pickle";
  {
    const MemoryHistoryRecorder recorder;
    const at::Tensor a = at::randn({1024, 1024}, kGpu);
    const at::Tensor b = at::mm(a, a);
    recorder.write_snapshot(file);
  }
  std::ifstream in(file, std::ios::binary);
  char first = 0;
  in.get(first);
  EXPECT_EQ(static_cast<unsigned char>(first), 0x80) << "a pickle starts with the PROTO opcode";
  EXPECT_GT(std::filesystem::file_size(file), 1000u);
  print("snapshot_bytes", std::to_string(std::filesystem::file_size(file)));
}

}  // namespace
}  // namespace voxfit::memory
