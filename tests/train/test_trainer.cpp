#include <gtest/gtest.h>

#include <torch/torch.h>
#include <cstdio>
#include <cstdlib>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "voxfit/core/error.h"
#include "voxfit/core/provenance.h"
#include "voxfit/data/preprocess.h"
#include "voxfit/io/dataset.h"
#include "voxfit/io/volume_io.h"
#include "voxfit/train/checkpoint.h"
#include "voxfit/train/event_writer.h"
#include "voxfit/train/predictor.h"
#include "voxfit/train/trainer.h"

namespace voxfit::train {
namespace {

namespace fs = std::filesystem;

class TrainerTest : public test::TempDirTest {
 protected:
  static fs::path cache() { return test::prepared_ct_cache(); }

  TrainOptions small_run(const fs::path& out, int64_t steps) const {
    TrainOptions o;
    o.cache_dir = cache();
    o.output_dir = out;
    o.model = "unet3d";
    o.model_context.patch = {16, 48, 48};
    o.model_context.params = {{"stages", "4"}, {"base_features", "8"}, {"max_features", "64"}};
    o.steps = steps;
    o.batch = 2;
    o.step.optimizer = OptimizerOptions::defaults_for(OptimizerKind::kSgd);
    o.loader.threads = 2;
    o.log_every = 1;
    o.seed = 7;
    return o;
  }
};

std::vector<torch::Tensor> weights(const fs::path& ckpt, const TrainOptions& o) {
  auto net = models::make_model(o.model, [&] {
    auto c = o.model_context;
    c.in_channels = 1;
    c.num_classes = 4;
    return c;
  }());
  load_weights(ckpt, *net);
  return net->parameters();
}

// The CT at 6 mm (15 x 51 x 61 voxels) fits in one 16 x 64 x 64 patch, so every step trains on the
// whole volume and validation (by sliding window) measures what the steps optimise. Adam at a
// high constant rate and no augmentation: the question is whether the pipeline (loader, network,
// loss, optimiser, validation) can learn at all within a CPU budget, not a recipe.
TEST_F(TrainerTest, SmallUNetLearnsTheOrgansOfTheRealCt) {
  const fs::path coarse = dir() / "cache6mm";
  data::PrepareOptions po;
  po.spacing = std::array<double, 3>{6.0, 6.0, 6.0};
  data::prepare_dataset(io::load_dataset(test::ct_dataset_manifest()), coarse, po);
  auto o = small_run(dir() / "run", 40);
  o.cache_dir = coarse;
  o.model_context.patch = {16, 64, 64};
  o.step.optimizer = OptimizerOptions::defaults_for(OptimizerKind::kAdamW);
  o.step.optimizer.lr = 3e-3;
  o.schedule.kind = ScheduleKind::kConstant;
  o.loader.augment.enabled = false;
  o.step.spatial_augment.reset();
  o.log_every = 20;

  // Dice of the untrained network, the same way validation measures it.
  torch::manual_seed(o.seed);
  auto ctx = o.model_context;
  ctx.num_classes = 4;
  StepOptions so;
  so.spatial_augment.reset();
  TrainStep untrained(models::make_model("unet3d", ctx), torch::kCPU, so);
  const auto plan = data::load_plan(coarse);
  SlidingWindowOptions sw;
  sw.patch = o.model_context.patch;
  const double before = validate(untrained, plan, plan.case_ids(), sw).mean;

  const auto s = train_model(o);
  EXPECT_EQ(s.steps_done, 40);
  EXPECT_GT(s.best_dice, before + 0.25) << "before " << before;
  EXPECT_GT(s.best_dice, 0.4);
}

// The quickstart's learnability check as a user runs it: `voxfit data demo` (the T1 MRI) and
// `voxfit train --config tools/quickstart-train.ini` (the CPU sweep's small UNet, 150 steps of
// batch 2, seed 0). Measured on 2 cores (docs/performance-notes.md, entry 20): 0.776 for seed 0,
// 0.760 and 0.656 for seeds 1 and 2; the same run on the 4-valued mask the demo took as its image
// before ends at 0.556, with label 3 at 0 (the default run on it stayed at 0.39).
TEST_F(TrainerTest, QuickstartUNetLearnsTheDemoT1Mri) {
  const fs::path demo = dir() / "demo", run = dir() / "run";
  auto r = test::run_voxfit("data demo '" + demo.string() + "' --mri-dir '" + test::demo_mri_dir().string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_voxfit("train --config '" + (test::source_dir() / "tools" / "quickstart-train.ini").string() +
                       "' --dataset '" + (demo / "dataset.json").string() + "' --cache '" + (dir() / "cache").string() +
                       "' --output '" + run.string() + "' --seed 0");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto config = nlohmann::json::parse(std::ifstream(run / "config.json"));
  EXPECT_EQ(config["model"], "unet3d");
  EXPECT_LE(config["steps"].get<int64_t>(), 150);
  int64_t steps = 0;
  nlohmann::json last;
  std::ifstream jl(run / "log.jsonl");
  for (std::string line; std::getline(jl, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("val_mean_dice"))
      last = j;
    else
      ++steps;
  }
  EXPECT_EQ(steps, config["steps"].get<int64_t>());
  ASSERT_TRUE(last.is_object()) << "no validation in " << (run / "log.jsonl");
  ASSERT_EQ(last["val_dice_per_class"].size(), 6u) << last.dump();
  ASSERT_TRUE(last["val_mean_dice"].is_number()) << last.dump();
  std::printf("quickstart UNet: mean validation Dice %.4f after %lld steps\n", last["val_mean_dice"].get<double>(),
              static_cast<long long>(steps));
  EXPECT_GT(last["val_mean_dice"].get<double>(), 0.6) << last.dump();
}

TEST_F(TrainerTest, WritesLogsConfigCheckpointsAndTensorBoard) {
  auto o = small_run(dir() / "run", 4);
  o.log_every = 2;
  const auto s = train_model(o);
  EXPECT_EQ(s.steps_done, 4);
  for (const char* f : {"config.json", "plan.json", "log.jsonl", "log.csv", "last.pt", "best.pt"})
    EXPECT_TRUE(fs::exists(o.output_dir / f)) << f;
  std::ifstream jl(o.output_dir / "log.jsonl");
  std::string line;
  int steps = 0, validations = 0;
  while (std::getline(jl, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("val_mean_dice"))
      ++validations;
    else {
      ++steps;
      EXPECT_GT(j["samples_per_s"].get<double>(), 0);
      EXPECT_GT(j["peak_allocated_bytes"].get<double>(), 0);
    }
  }
  EXPECT_EQ(steps, 4);
  EXPECT_EQ(validations, 1);
  fs::path events;
  for (const auto& e : fs::directory_iterator(o.output_dir / "tensorboard")) events = e.path();
  const auto scalars = read_scalar_events(events);
  int losses = 0;
  for (const auto& e : scalars) losses += e.tag == "train/loss";
  EXPECT_EQ(losses, 4);
  const auto config = nlohmann::json::parse(std::ifstream(o.output_dir / "config.json"));
  EXPECT_EQ(config["model"], "unet3d");
  EXPECT_EQ(config["classes"], 4);
  // What decides how a run learns besides the optimiser: sampling and augmentation.
  EXPECT_EQ(config["oversample"], o.loader.oversample_foreground);
  EXPECT_EQ(config["augment"]["flip_probability"], o.loader.augment.flip_probability);
  EXPECT_EQ(config["augment"]["enabled"], o.loader.augment.enabled);
  EXPECT_EQ(config["provenance"]["commit"], voxfit_commit());
  EXPECT_EQ(config["provenance"]["driver"], "none");  // a CPU run
  // The run's memory breakdown: parts adding up to its peak, the tensor counts within 1% of it.
  ASSERT_TRUE(config.contains("memory_breakdown")) << config.dump(1);
  const auto& mb = config["memory_breakdown"];
  EXPECT_EQ(mb["batch"], 2);
  std::int64_t sum = 0;
  for (const auto& p : mb["parts"]) sum += p["bytes"].get<std::int64_t>();
  EXPECT_EQ(sum, mb["peak_allocated"].get<std::int64_t>());
  EXPECT_LT(mb["unattributed_share"].get<double>(), 0.01) << mb.dump(1);
  EXPECT_GT(mb["validation_peak_allocated"].get<std::uint64_t>(), 0u);
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    EXPECT_GT(fs::file_size(o.output_dir / "memory-breakdown.png"), 1000u);
  }
}

TEST_F(TrainerTest, InterruptedAndResumedRunEqualsAnUninterruptedOne) {
  auto whole = small_run(dir() / "whole", 6);
  train_model(whole);
  auto part = small_run(dir() / "part", 6);
  part.stop_after = 3;
  EXPECT_EQ(train_model(part).steps_done, 3);
  EXPECT_EQ(read_checkpoint_meta(part.output_dir / "last.pt").step, 3);
  // As if killed after logging steps 4 and 5 but before their checkpoint: they run again and
  // are logged once.
  {
    std::ofstream(part.output_dir / "log.jsonl", std::ios::app) << "{\"step\":4,\"loss\":1}\n{\"step\":5,\"loss\":1}\n";
    std::ofstream(part.output_dir / "log.csv", std::ios::app) << "4,1\n5,1\n";
  }
  part.stop_after = 0;
  part.resume = true;
  EXPECT_EQ(train_model(part).steps_done, 6);
  std::vector<int64_t> logged;
  std::ifstream jl(part.output_dir / "log.jsonl");
  for (std::string line; std::getline(jl, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("val_mean_dice")) logged.push_back(j["step"].get<int64_t>());
  }
  EXPECT_EQ(logged, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  std::ifstream csv(part.output_dir / "log.csv");
  int csv_rows = 0;
  for (std::string line; std::getline(csv, line);) ++csv_rows;
  EXPECT_EQ(csv_rows, 7);  // header + 6 steps
  const auto a = weights(whole.output_dir / "last.pt", whole), b = weights(part.output_dir / "last.pt", part);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
}

// A step that runs out of the budget ends the run with one line that says where (the phase) and
// what held the memory (the breakdown's largest parts), and leaves no checkpoint behind.
TEST_F(TrainerTest, AnOutOfMemoryStepEndsTheRunWithOneLineNamingThePhaseAndTheLargestParts) {
  auto o = small_run(dir() / "run", 3);
  o.budget.kind = memory::BudgetKind::Size;
  o.budget.visible_bytes = 24ull << 20;  // the network and SGD fit; a step's activations do not
  try {
    train_model(o);
    FAIL() << "trained within 24 MiB";
  } catch (const BudgetError& e) {
    const std::string what = e.what();
    std::cout << "[ line ] " << what << "\n";
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_EQ(what.find("out of memory in the "), 0u) << what;
    EXPECT_TRUE(what.find("the forward") != std::string::npos || what.find("the backward") != std::string::npos)
        << what;
    EXPECT_NE(what.find("of step 1 at batch 2: peak "), std::string::npos) << what;
    EXPECT_NE(what.find(" usable; largest: "), std::string::npos) << what;
    EXPECT_NE(what.find("it asked for "), std::string::npos) << what;
  }
  EXPECT_TRUE(fs::exists(dir() / "run" / "config.json"));
  EXPECT_FALSE(fs::exists(dir() / "run" / "last.pt"));
}

TEST_F(TrainerTest, ResumeRefusesAChangedRunAndAFreshRunRefusesAnOldFolder) {
  auto o = small_run(dir() / "run", 2);
  train_model(o);
  EXPECT_THROW(train_model(o), ConfigError);  // not --resume
  o.resume = true;
  o.batch = 3;
  try {
    train_model(o);
    FAIL() << "resumed with another batch size";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("batch"), std::string::npos) << e.what();
  }
}

TEST_F(TrainerTest, PredictWritesALabelMapWithTheInputsGeometry) {
  auto o = small_run(dir() / "run", 2);
  train_model(o);
  Predictor p(o.output_dir / "best.pt", torch::kCPU);
  const auto input = test::totalseg_dir() / "example_ct_sm.nii.gz";
  const Volume label = p.predict(io::read_channels(input));
  io::write_volume(dir() / "pred.nii.gz", label);
  const Volume back = io::read_volume(dir() / "pred.nii.gz");
  const Volume original = io::read_volume(input);
  EXPECT_EQ(grid_difference(back, original), "");
  EXPECT_EQ(back.data.sizes(), original.data.sizes());
  EXPECT_LE(back.data.max().item<int64_t>(), 3);
}

TEST_F(TrainerTest, Fp16OnCpuIsRefused) {
  auto o = small_run(dir() / "run", 1);
  o.step.precision = Precision::kFp16;
  EXPECT_THROW(train_model(o), UnsupportedError);
}

}  // namespace
}  // namespace voxfit::train
