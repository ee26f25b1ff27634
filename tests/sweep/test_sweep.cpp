#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "voxfit/core/runtime.h"
#include "voxfit/core/units.h"
#include "voxfit/data/plan.h"
#include "voxfit/memory/budget.h"
#include "voxfit/memory/oom.h"
#include "voxfit/sweep/report.h"
#include "voxfit/sweep/sweep.h"

namespace voxfit::sweep {
namespace {

namespace fs = std::filesystem;

memory::BudgetSpec size_budget(std::uint64_t bytes) {
  memory::BudgetSpec b;
  b.kind = memory::BudgetKind::Size;
  b.visible_bytes = bytes;
  return b;
}

// A small UNet on 16x32x32 patches of the real CT: CPU probes take a fraction of a second.
ProbeOptions tiny_unet() {
  const auto plan = data::load_plan(test::prepared_ct_cache());
  ProbeOptions p;
  p.model = "unet3d";
  p.model_context.patch = {16, 32, 32};
  p.model_context.in_channels = plan.channels();
  p.model_context.num_classes = plan.num_classes();
  p.model_context.params = {{"stages", "3"}, {"base_features", "4"}, {"max_features", "16"}};
  p.step.optimizer = train::OptimizerOptions::defaults_for(train::OptimizerKind::kSgd);
  p.warmup_steps = 1;
  p.timed_steps = 2;
  return p;
}

std::shared_ptr<const data::CacheIndex> ct_index() {
  return data::CacheIndex::load(data::load_plan(test::prepared_ct_cache()));
}

class Sweep : public test::TempDirTest {};

TEST_F(Sweep, SearchEndsOnAnExactBoundaryCheckedIndependently) {
  const auto budget = size_budget(320 * kMiB);
  const auto plan = data::load_plan(test::prepared_ct_cache());
  const auto entry = search_point(plan, ct_index(), tiny_unet(), budget, 512, /*throughput_table=*/false);
  const std::int64_t b = entry.max_batch;
  ASSERT_GT(b, 2) << entry.to_json().dump(2);
  EXPECT_EQ(entry.first_failing, b + 1);
  // Six or seven: this tiny model's peaks at batches 1-3 are noisy on the CPU (batch 1 above batch
  // 2), so the first prediction overshoots and the search bisects back. The search's probe counts
  // on real GPU memory curves are tested by replaying recorded H200 searches (test_batch_search).
  EXPECT_LE(entry.probes, 7) << entry.to_json().dump(2);
  EXPECT_EQ(entry.leaks, 0);
  // The memory model and the measured peak at the answer agree within 15%.
  EXPECT_LT(std::abs(entry.fit_error_at_max), 0.15) << entry.to_json().dump(2);
  // The journal's line is the type, whole: it reads back to the same line.
  EXPECT_EQ(PointResult::from_json(entry.to_json()).to_json(), entry.to_json());

  memory::ScopedBudget scoped(budget, torch::kCPU);
  TrainingProbe fresh(ct_index(), tiny_unet());
  EXPECT_TRUE(fresh(b).fits);
  const Probe over = fresh(b + 1);
  EXPECT_FALSE(over.fits);
  EXPECT_NE(over.error.find("memory"), std::string::npos) << over.error;
}

std::vector<std::string> lines_of(const fs::path& file) {
  std::vector<std::string> lines;
  std::ifstream in(file);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

TEST_F(Sweep, ASearchStoppedMidwayKeepsItsProbesAndGoesOnFromThem) {
  const auto budget = size_budget(320 * kMiB);
  const auto plan = data::load_plan(test::prepared_ct_cache());
  const auto probes = dir() / "probes.jsonl";
  const auto whole = search_point(plan, ct_index(), tiny_unet(), budget, 512, false, {}, probes);
  const int n = whole.probes;
  ASSERT_GE(n, 4) << whole.to_json().dump(2);
  EXPECT_EQ(whole.resumed_probes, 0);
  auto lines = lines_of(probes);
  ASSERT_EQ(static_cast<int>(lines.size()), n);  // one line a probe, written as it finished

  // Stopped after three probes (the third line cut mid-write): two are kept and the search goes
  // on from them, along the same path to the same boundary.
  {
    std::ofstream out(probes, std::ios::trunc);
    out << lines[0] << "\n" << lines[1] << "\n" << lines[2].substr(0, lines[2].size() / 2);
  }
  const auto resumed = search_point(plan, ct_index(), tiny_unet(), budget, 512, false, {}, probes);
  EXPECT_EQ(resumed.resumed_probes, 2) << resumed.to_json().dump(2);
  EXPECT_EQ(resumed.probes, whole.probes);
  EXPECT_EQ(resumed.max_batch, whole.max_batch);
  EXPECT_EQ(resumed.first_failing, whole.first_failing);
  ASSERT_EQ(resumed.probe_log.size(), whole.probe_log.size());
  for (int i = 0; i < n; ++i) EXPECT_EQ(resumed.probe_log[i].batch, whole.probe_log[i].batch) << i;

  // Another budget is another point: nothing is taken from this one's probes.
  const auto other = search_point(plan, ct_index(), tiny_unet(), size_budget(256 * kMiB), 512, false, {}, probes);
  EXPECT_EQ(other.resumed_probes, 0);
}

TEST_F(Sweep, TwoHundredForcedOomsLeaveMemoryAtTheBaseline) {
  // 200 probes that run out of memory in one process (issue 10; the sweep's own criterion is 50).
  // Batch 256 is far past this budget (about 8 MiB a sample) and still quick to draw: the
  // loader's batch is host memory, so each probe draws it before its step runs out of memory.
  memory::ScopedBudget scoped(size_budget(192 * kMiB), torch::kCPU);
  TrainingProbe probe(ct_index(), tiny_unet());
  const auto baseline = memory::current_allocated_bytes(torch::kCPU);
  for (int i = 0; i < 200; ++i) ASSERT_FALSE(probe(256).fits) << i;
  EXPECT_EQ(probe.leaks(), 0);
  EXPECT_EQ(memory::current_allocated_bytes(torch::kCPU), baseline);
  const Probe one = probe(1);
  EXPECT_TRUE(one.fits) << one.error;  // and the allocator still works
}

TEST_F(Sweep, JournalResumesAndReportsSideBySide) {
  SweepOptions o;
  o.cache_dir = test::prepared_ct_cache();
  o.output_dir = dir() / "sweep";
  o.grid.models = {"unet3d"};
  o.grid.patches = {{16, 32, 32}};
  o.grid.precisions = {train::Precision::kFp32};
  o.grid.budgets = {size_budget(256 * kMiB), size_budget(384 * kMiB)};
  o.probe = tiny_unet();
  o.model_params["unet3d"] = o.probe.model_context.params;
  int runs = 0;
  run_sweep(o, [&](const PointResult&) { ++runs; });
  EXPECT_EQ(runs, 2);
  // A finished point's probes leave the probe journal; with every point done it is gone.
  EXPECT_FALSE(fs::exists(o.output_dir / "probes.jsonl"));
  const auto journal = o.output_dir / "results.jsonl";
  auto entries = read_journal(journal);
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_LT(entries[0]["max_batch"].get<int>(), entries[1]["max_batch"].get<int>());
  EXPECT_EQ(entries[0].value("host_allocator", ""), memory::host_allocator_settings());

  runs = 0;
  run_sweep(o, [&](const PointResult&) { ++runs; });
  EXPECT_EQ(runs, 0) << "a finished sweep ran again";

  // A crash mid-append leaves half a line; only the lost point runs again.
  {
    std::ofstream out(journal, std::ios::trunc);
    out << entries[0].dump() << "\n" << entries[1].dump().substr(0, 40);
  }
  run_sweep(o, [&](const PointResult&) { ++runs; });
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(read_journal(journal).size(), 2u);

  std::ifstream md(o.output_dir / "summary.md");
  const std::string summary((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(summary.find("256.00 MiB max batch"), std::string::npos) << summary;
  EXPECT_NE(summary.find("384.00 MiB max batch"), std::string::npos) << summary;
  // The knee beside the largest batch: its batch and samples/s.
  EXPECT_NE(summary.find("256.00 MiB knee (samples/s)"), std::string::npos) << summary;
  for (const auto& e : read_results(journal)) {
    ASSERT_GT(e.knee_batch, 0) << e.to_json().dump(2);
    EXPECT_NE(summary.find("| " + std::to_string(e.knee_batch) + " ("), std::string::npos) << summary;
  }
  std::ifstream csv(o.output_dir / "results.csv");
  int lines = 0;
  for (std::string l; std::getline(csv, l);) ++lines;
  EXPECT_EQ(lines, 3);
  EXPECT_NE(summary.find("256.00 MiB = 256.00 MiB usable"), std::string::npos) << summary;

  // Entries of one budget with different usable bytes (journals of older versions, which measured
  // the CUDA context again for each point) are reported as a range, not as the first one's.
  auto other = read_results(journal);
  PointResult copy = other[0];
  copy.patch = "16x32x48";
  copy.key += "-copy";
  copy.budget_report["usable_bytes"] = 257 * kMiB;
  other.push_back(copy);
  // Rows come in grid order, not journal order: a smaller patch journalled last comes first.
  PointResult smaller = other[0];
  smaller.patch = "8x32x32";
  smaller.key += "-smaller";
  other.push_back(smaller);
  fs::create_directories(dir() / "report");
  write_reports(other, dir() / "report");
  std::ifstream md2(dir() / "report" / "summary.md");
  const std::string ranged((std::istreambuf_iterator<char>(md2)), std::istreambuf_iterator<char>());
  EXPECT_NE(ranged.find("256.00 MiB = 256.00 MiB to 257.00 MiB usable"), std::string::npos) << ranged;
  ASSERT_NE(ranged.find("| 8x32x32 |"), std::string::npos) << ranged;
  EXPECT_LT(ranged.find("| 8x32x32 |"), ranged.find("| 16x32x32 |")) << ranged;
  EXPECT_LT(ranged.find("| 16x32x32 |"), ranged.find("| 16x32x48 |")) << ranged;

  // Plots: one model and patch get memory.png / throughput.png; several get a pair each.
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    EXPECT_TRUE(fs::exists(o.output_dir / "memory.png"));
    EXPECT_TRUE(fs::exists(o.output_dir / "throughput.png"));
    EXPECT_NE(summary.find("](memory.png)"), std::string::npos) << summary;
    for (const char* patch : {"16x32x32", "16x32x48"})
      for (const char* chart : {"memory", "throughput"}) {
        const std::string png = std::string(chart) + "-unet3d-" + patch + ".png";
        EXPECT_TRUE(fs::exists(dir() / "report" / png)) << png;
        EXPECT_NE(ranged.find("](" + png + ")"), std::string::npos) << ranged;
      }
    EXPECT_FALSE(fs::exists(dir() / "report" / "memory.png"));
    // The charts follow the table's grid order too.
    EXPECT_LT(ranged.find("](memory-unet3d-8x32x32.png)"), ranged.find("](memory-unet3d-16x32x32.png)")) << ranged;
  }
}

TEST_F(Sweep, CommandLineRunsAndRejectsASweepWithoutBudget) {
  // A CPU budget: the sweep runs on the CPU also where a GPU is present (device auto would take it).
  auto r = test::run_voxfit("sweep --device cpu --dataset " + test::prepared_ct_cache().string() +
                            " --models unet3d --patches 16x32x32 --stages 3 --base-features 4 --max-features 16"
                            " --budgets 256MiB --warmup-steps 1 --timed-steps 2 --no-throughput-table"
                            " --optimizer adamw --lr 3e-4 --validation-fraction 0.5 --output " +
                            (dir() / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("max batch"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir() / "out" / "results.csv"));
  // The probes train with the optimiser asked for, not unet3d's default SGD.
  const auto entries = read_journal(dir() / "out" / "results.jsonl");
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].value("optimizer", ""), "adamw");
  EXPECT_DOUBLE_EQ(entries[0].value("lr", 0.0), 3e-4);
  // Where the number came from.
  const auto& from = entries[0].at("provenance");
  EXPECT_EQ(from.at("voxfit"), voxfit_version());
  EXPECT_EQ(from.at("libtorch"), torch_version());
  for (const char* k : {"commit", "cuda", "cudnn", "device", "driver", "host"})
    EXPECT_FALSE(from.at(k).get<std::string>().empty()) << k;
  r = test::run_voxfit("sweep --dataset " + test::prepared_ct_cache().string() + " --models unet3d --output " +
                       (dir() / "x").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("budget"), std::string::npos) << r.err;
}

TEST_F(Sweep, IsolatedProbesRunInTheirOwnProcessesAndFindTheSameBoundary) {
  const std::string common = "sweep --device cpu --dataset " + test::prepared_ct_cache().string() +
                             " --models unet3d --patches 16x32x32 --stages 3 --base-features 4 --max-features 16"
                             " --budgets 256MiB --warmup-steps 1 --timed-steps 2 --no-throughput-table --output ";
  const auto here = test::run_voxfit(common + (dir() / "here").string());
  ASSERT_EQ(here.exit_code, 0) << here.err;
  const auto isolated = test::run_voxfit(common + (dir() / "isolated").string() + " --isolate");
  ASSERT_EQ(isolated.exit_code, 0) << isolated.err;
  const auto first = [](const fs::path& journal) {
    std::ifstream in(journal);
    std::string line;
    std::getline(in, line);
    return nlohmann::json::parse(line);
  };
  const auto a = first(dir() / "here" / "results.jsonl"), b = first(dir() / "isolated" / "results.jsonl");
  EXPECT_FALSE(a["isolated"].get<bool>());
  EXPECT_TRUE(b["isolated"].get<bool>());
  ASSERT_GT(b["max_batch"].get<std::int64_t>(), 2) << b.dump(2);
  EXPECT_EQ(b["max_batch"], a["max_batch"]);
  EXPECT_EQ(b["first_failing"], a["first_failing"]);
  EXPECT_EQ(b["budget_report"]["usable_bytes"], a["budget_report"]["usable_bytes"]);
  // The same probes, each measured in a fresh process: CPU memory is deterministic, so the peaks
  // match the in-process ones byte for byte.
  ASSERT_EQ(b["probe_log"].size(), a["probe_log"].size());
  for (std::size_t i = 0; i < a["probe_log"].size(); ++i) {
    EXPECT_EQ(b["probe_log"][i]["batch"], a["probe_log"][i]["batch"]);
    EXPECT_EQ(b["probe_log"][i]["fits"], a["probe_log"][i]["fits"]);
    EXPECT_EQ(b["probe_log"][i].value("peak_reserved_bytes", 0), a["probe_log"][i].value("peak_reserved_bytes", 0));
    EXPECT_GT(b["probe_log"][i]["seconds"].get<double>(), 0);
  }
  for (const auto& e : fs::directory_iterator(dir() / "isolated"))
    EXPECT_EQ(e.path().filename().string().rfind(".probe-", 0), std::string::npos) << "left behind: " << e.path();

  const auto refused = test::run_voxfit("train --device cpu --dataset " + test::prepared_ct_cache().string() +
                                        " --model unet3d --batch 2 --isolate --output " + (dir() / "run").string());
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("--isolate"), std::string::npos) << refused.err;
}

TEST_F(Sweep, TrainBatchMaxThenTrainsAtTheBatchItFound) {
  // The run at the search's answer, validation included, must fit the same budget: the loader's
  // prefetched batches are host memory (not charged), the step's copy of its batch is charged,
  // and validation sums a whole volume's logits in host memory when they do not fit.
  for (const std::string isolate : {"", " --isolate"}) {
    const fs::path run = dir() / ("run" + std::to_string(isolate.size()));
    const auto r = test::run_voxfit("train --device cpu --threads 1 --dataset " + test::prepared_ct_cache().string() +
                                    " --model unet3d --patch 16,32,32 --stages 3 --base-features 4 --max-features 16"
                                    " --vram 256MiB --batch max --steps 2 --loader-threads 2 --output " +
                                    run.string() + isolate);
    ASSERT_EQ(r.exit_code, 0) << isolate << "\n" << r.out << r.err;
    const auto at = r.out.find("--batch max: ");
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::int64_t b = std::stoll(r.out.substr(at + 13));
    EXPECT_GT(b, 2) << r.out;
    EXPECT_NE(r.out.find("trained 2 steps"), std::string::npos) << r.out;
    std::ifstream config(run / "config.json");
    EXPECT_EQ(nlohmann::json::parse(config).at("batch").get<std::int64_t>(), b);
  }
}

}  // namespace
}  // namespace voxfit::sweep
