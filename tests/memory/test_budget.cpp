#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "support/test_support.h"
#include "voxfit/core/error.h"
#include "voxfit/core/runtime.h"
#include "voxfit/core/units.h"
#include "voxfit/memory/budget.h"
#include "voxfit/memory/cpu_budget.h"

namespace voxfit::memory {
namespace {

CardTable shipped_table() { return load_card_table(test::source_dir() / "data" / "cards.csv"); }

TEST(BudgetParse, NoneSizeOrCard) {
  const CardTable table = shipped_table();
  EXPECT_EQ(parse_budget("", "", table).kind, BudgetKind::None);
  EXPECT_EQ(parse_budget("", "", table).label(), "none");

  const BudgetSpec size = parse_budget("24GiB", "", table);
  EXPECT_EQ(size.kind, BudgetKind::Size);
  EXPECT_EQ(size.visible_bytes, 24 * kGiB);
  EXPECT_EQ(size.label(), "24.00 GiB");
  EXPECT_EQ(parse_budget("48GB", "", table).visible_bytes, 48000000000ull);

  const BudgetSpec card = parse_budget("", "a40", table);
  EXPECT_EQ(card.kind, BudgetKind::Card);
  EXPECT_EQ(card.visible_bytes, 45416 * kMiB);
  EXPECT_EQ(card.label(), "a40");
  ASSERT_TRUE(card.card.has_value());
  EXPECT_EQ(card.card->name, "NVIDIA A40");
}

TEST(BudgetParse, BadInputIsAConfigError) {
  const CardTable table = shipped_table();
  EXPECT_THROW(parse_budget("24GiB", "rtx3090", table), ConfigError);
  EXPECT_THROW(parse_budget("lots", "", table), ConfigError);
  EXPECT_THROW(parse_budget("-3GiB", "", table), ConfigError);
  try {
    parse_budget("", "rtx5090", table);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("rtx3090"), std::string::npos) << "lists the known ids: " << e.what();
  }
}

TEST(BudgetPlan, CpuBudgetIsTheWholeSize) {
  const BudgetReport r = plan_budget(parse_budget("512MiB", "", shipped_table()), c10::Device(c10::kCPU));
  EXPECT_TRUE(r.capped);
  EXPECT_EQ(r.device, "cpu");
  EXPECT_EQ(r.visible_bytes, 512 * kMiB);
  EXPECT_EQ(r.overhead_bytes, 0u);
  EXPECT_EQ(r.usable_bytes, 512 * kMiB);
  EXPECT_EQ(r.device_total_bytes, host_memory().total_bytes);
  EXPECT_EQ(r.to_json()["usable_bytes"].get<std::uint64_t>(), 512 * kMiB);
  EXPECT_NE(r.to_text().find("512.00 MiB for tensors"), std::string::npos) << r.to_text();

  const BudgetReport none = plan_budget(BudgetSpec{}, c10::Device(c10::kCPU));
  EXPECT_FALSE(none.capped);
  EXPECT_EQ(none.usable_bytes, 0u);
}

TEST(BudgetPlan, BudgetLargerThanTheMachineIsABudgetError) {
  ASSERT_GT(host_memory().total_bytes, 0u);
  EXPECT_THROW(plan_budget(parse_budget("1024TiB", "", shipped_table()), c10::Device(c10::kCPU)), BudgetError);
}

TEST(BudgetPlan, CudaWithoutCudaIsUnsupported) {
  if (cuda_available()) GTEST_SKIP() << "this machine has CUDA (tests/memory/test_cuda_memory.cpp covers it)";
  EXPECT_THROW(plan_budget(parse_budget("24GiB", "", shipped_table()), c10::Device(c10::kCUDA, 0)), UnsupportedError);
}

TEST(ScopedBudgetCpu, CapsTheCpuAllocatorAndRestoresIt) {
  c10::Allocator* const before = c10::GetAllocator(c10::kCPU);
  {
    const ScopedBudget budget(parse_budget("1MiB", "", shipped_table()), c10::Device(c10::kCPU));
    EXPECT_NE(c10::GetAllocator(c10::kCPU), before);
    const auto stats = active_cpu_budget_stats();
    ASSERT_TRUE(stats.has_value());
    EXPECT_EQ(stats->cap_bytes, kMiB);
    EXPECT_NO_THROW(at::empty({static_cast<int64_t>(kMiB)}, at::kByte));
    EXPECT_THROW(at::empty({static_cast<int64_t>(kMiB) + 1}, at::kByte), c10::OutOfMemoryError);
  }
  EXPECT_EQ(c10::GetAllocator(c10::kCPU), before);
  EXPECT_FALSE(active_cpu_budget_stats().has_value());
}

TEST(ScopedBudgetCpu, NoBudgetStillCounts) {
  const ScopedBudget budget(BudgetSpec{}, c10::Device(c10::kCPU));
  const at::Tensor t = at::empty({1000}, at::kFloat);
  const auto stats = active_cpu_budget_stats();
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->current_bytes, 4000u);
  EXPECT_EQ(stats->ooms, 0u);
}

// voxfit's main (and the test binaries, tests/support) keep freed host blocks in the process: a
// block far over glibc's 32 MiB mmap threshold comes from the arena, stays there when freed, and
// the next block of its size reuses it instead of mapping (and zero-filling) fresh pages.
TEST(HostAllocator, FreedLargeBlocksStayInTheProcessForTheNextAllocation) {
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 33)
  if (!default_host_allocator_settings())
    GTEST_SKIP() << "glibc's malloc tunables are set in the environment (" << host_allocator_settings() << ")";
  EXPECT_EQ(host_allocator_settings(), "glibc, freed blocks kept (mmap off, no trim)");
  constexpr std::size_t kBlock = 256 * kMiB;
  const struct mallinfo2 before = mallinfo2();
  char* volatile first = static_cast<char*>(std::malloc(kBlock));  // volatile: never elided
  ASSERT_NE(first, nullptr);
  std::memset(first, 1, kBlock);
  const struct mallinfo2 held = mallinfo2();
  EXPECT_EQ(held.hblkhd, before.hblkhd) << "the block was mapped on its own";
  EXPECT_GE(held.arena, before.arena + kBlock);
  std::free(first);
  const struct mallinfo2 freed = mallinfo2();
  EXPECT_EQ(freed.arena, held.arena) << "the arena was trimmed";
  EXPECT_GE(freed.fordblks, kBlock);
  char* volatile second = static_cast<char*>(std::malloc(kBlock));
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(mallinfo2().arena, freed.arena) << "the second block did not reuse the first one's memory";
  std::free(second);
#else
  GTEST_SKIP() << "not glibc >= 2.33 (" << host_allocator_settings() << ")";
#endif
}

}  // namespace
}  // namespace voxfit::memory
