// A sweep point's memory breakdowns: in results.jsonl (per probe, and at batch 1 and the largest
// batch), adding up to the measured peak, and in summary.md with a stacked-bar picture.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "voxfit/core/units.h"
#include "voxfit/data/plan.h"
#include "voxfit/sweep/sweep.h"

namespace voxfit::sweep {
namespace {

namespace fs = std::filesystem;

class SweepMemory : public test::TempDirTest {};

TEST_F(SweepMemory, EveryPointHasABreakdownThatAddsUpAndIsDrawn) {
  const auto plan = data::load_plan(test::prepared_ct_cache());
  SweepOptions o;
  o.cache_dir = test::prepared_ct_cache();
  o.output_dir = dir() / "sweep";
  o.grid.models = {"unet3d"};
  o.grid.patches = {{16, 32, 32}};
  o.grid.precisions = {train::Precision::kFp32};
  memory::BudgetSpec budget;
  budget.kind = memory::BudgetKind::Size;
  budget.visible_bytes = 256 * kMiB;
  o.grid.budgets = {budget};
  o.throughput_table = false;
  o.probe.model_context.params = {{"stages", "3"}, {"base_features", "4"}, {"max_features", "16"}};
  o.model_params["unet3d"] = o.probe.model_context.params;
  o.probe.warmup_steps = 1;
  o.probe.timed_steps = 1;
  run_sweep(o);
  const auto entries = read_journal(o.output_dir / "results.jsonl");
  ASSERT_EQ(entries.size(), 1u);
  const auto& e = entries[0];
  const std::int64_t max_batch = e.at("max_batch").get<std::int64_t>();
  ASSERT_GT(max_batch, 1);
  const auto& mb = e.at("memory_breakdown");
  ASSERT_TRUE(mb.contains("batch_1") && mb.contains("max_batch")) << mb.dump(1);
  EXPECT_EQ(mb["batch_1"]["batch"], 1);
  EXPECT_EQ(mb["max_batch"]["batch"], max_batch);
  const auto usable = e["budget_report"]["usable_bytes"].get<std::uint64_t>();
  for (const auto* b : {&mb["batch_1"], &mb["max_batch"]}) {
    std::int64_t sum = 0, activations = 0;
    for (const auto& p : (*b)["parts"]) {
      sum += p["bytes"].get<std::int64_t>();
      if (p["group"] == "activations") activations += p["bytes"].get<std::int64_t>();
    }
    EXPECT_EQ(sum, (*b)["peak_allocated"].get<std::int64_t>());
    EXPECT_LT((*b)["unattributed_share"].get<double>(), 0.01) << b->dump(1);
    EXPECT_GT(activations, 0);
    EXPECT_EQ((*b)["usable"].get<std::uint64_t>(), usable);
    EXPECT_EQ((*b)["headroom"].get<std::uint64_t>() + (*b)["peak_reserved"].get<std::uint64_t>(), usable);
  }
  // Activations grow with the batch; static memory does not.
  const auto group = [](const nlohmann::json& b, const char* g) {
    std::int64_t n = 0;
    for (const auto& p : b["parts"])
      if (p["group"] == g) n += p["bytes"].get<std::int64_t>();
    return n;
  };
  EXPECT_GT(group(mb["max_batch"], "activations"), (max_batch - 1) * group(mb["batch_1"], "activations") / 2);
  EXPECT_EQ(group(mb["max_batch"], "static"), group(mb["batch_1"], "static"));
  for (const auto& p : e["probe_log"]) {
    if (p["fits"].get<bool>()) {
      EXPECT_TRUE(p.contains("memory")) << p.dump();
    }
  }

  std::ifstream in(o.output_dir / "summary.md");
  const std::string md((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_NE(md.find("# Where the memory goes"), std::string::npos) << md;
  EXPECT_NE(md.find("| 256.00 MiB | " + std::to_string(max_batch) + " | "), std::string::npos) << md;
  EXPECT_NE(md.find("| 256.00 MiB | 1 | "), std::string::npos) << md;
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    const std::string png = "breakdown-unet3d-16x32x32-fp32-none-256.00-MiB.png";
    EXPECT_GT(fs::file_size(o.output_dir / png), 1000u) << png;
    EXPECT_NE(md.find("](" + png + ")"), std::string::npos) << md;
    EXPECT_TRUE(fs::exists(o.output_dir / "components-unet3d-16x32x32-fp32-none-256.00-MiB.png"));
  }
}

}  // namespace
}  // namespace voxfit::sweep
