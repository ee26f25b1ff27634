// The split a run trains on (a MONAI datalist's "validation" list, nnU-Net's splits_final.json,
// voxfit's own five folds, the random --validation-fraction split), splits.json and --fold, and
// predict on a folder of nnU-Net channel files (CASE_0000, CASE_0001, ...).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "io/io_test_util.h"
#include "support/test_support.h"
#include "voxfit/core/error.h"
#include "voxfit/data/plan.h"
#include "voxfit/data/preprocess.h"
#include "voxfit/io/dataset.h"
#include "voxfit/io/volume_io.h"

namespace voxfit::train {
namespace dataset_splits_test {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Ids = std::vector<std::string>;

// A small MR-like case (24 x 20 x 16 voxels, a bright box, intensities varied by `shift`) and its
// label map (classes 1 and 2 in two boxes): quick to prepare and to train a tiny UNet on.
Volume tiny_image(float shift) {
  Volume v;
  v.pixel_type = PixelType::Float32;
  auto t = torch::zeros({16, 20, 24});
  t.slice(0, 2, 14).slice(1, 3, 17).slice(2, 3, 21).fill_(100.0f + shift);
  t += torch::arange(24).to(torch::kFloat32).view({1, 1, 24});
  v.data = t.contiguous();
  v.geometry.spacing = {1.5, 1.5, 2.0};
  return v;
}

Volume tiny_label() {
  Volume v;
  v.pixel_type = PixelType::UInt8;
  v.data = torch::zeros({16, 20, 24}, torch::kUInt8);
  v.data.slice(0, 4, 10).slice(1, 5, 10).slice(2, 5, 12).fill_(1);
  v.data.slice(0, 6, 12).slice(1, 10, 15).slice(2, 12, 18).fill_(2);
  v.geometry.spacing = {1.5, 1.5, 2.0};
  return v;
}

// An MSD dataset.json in `root`: cases `training` (and `validation`, MONAI's datalist key, when
// given) with `channels` image files each (imagesTr/ID_ch.nii.gz) and labelsTr/ID.nii.gz.
fs::path msd_dataset(const fs::path& root, const Ids& training, const Ids& validation = {}, int channels = 1) {
  fs::create_directories(root / "imagesTr");
  fs::create_directories(root / "labelsTr");
  json j;
  j["name"] = "Splits";
  for (int c = 0; c < channels; ++c) j["modality"][std::to_string(c)] = "T" + std::to_string(c + 1);
  j["labels"] = {{"0", "background"}, {"1", "a"}, {"2", "b"}};
  float shift = 0;
  for (const auto* list : {&training, &validation}) {
    json entries = json::array();
    for (const auto& id : *list) {
      json images = json::array();
      for (int c = 0; c < channels; ++c) {
        const std::string image = "./imagesTr/" + id + "_" + std::to_string(c) + ".nii.gz";
        io::write_volume(root / image, tiny_image(shift += 5));
        images.push_back(image);
      }
      io::write_volume(root / "labelsTr" / (id + ".nii.gz"), tiny_label());
      entries.push_back({{"image", channels == 1 ? images[0] : images}, {"label", "./labelsTr/" + id + ".nii.gz"}});
    }
    if (!entries.empty()) j[list == &training ? "training" : "validation"] = entries;
  }
  test::write_text(root / "dataset.json", j.dump(2));
  return root;
}

data::Plan plan_of(const Ids& ids) {
  data::Plan p;
  p.cache_dir = "/nonexistent/cache";
  for (const auto& id : ids) p.cases.push_back({id, {16, 20, 24}, {}, ""});
  return p;
}

class DatasetSplits : public test::TempDirTest {};

TEST_F(DatasetSplits, MonaiValidationListIsTheRunSplitThroughTheCache) {
  const fs::path root = msd_dataset(dir() / "ds", {"c0", "c1", "c2"}, {"c3"});
  const auto d = io::load_dataset(root / "dataset.json");
  ASSERT_EQ(d.cases.size(), 4u);  // the validation cases are prepared too
  ASSERT_TRUE(d.splits.has_value());
  EXPECT_EQ(d.splits->source, "validation list");
  ASSERT_EQ(d.splits->folds.size(), 1u);
  EXPECT_EQ(d.splits->folds[0].validation, Ids{"c3"});

  data::prepare_dataset(d, dir() / "cache");
  const auto plan = data::load_plan(dir() / "cache");
  ASSERT_TRUE(plan.declared_splits.has_value());
  // Whatever the fraction and seed, the list decides.
  for (const double fraction : {0.2, 0.5})
    for (const std::uint64_t seed : {0u, 9u}) {
      const auto s = data::run_split(plan, fraction, seed);
      EXPECT_EQ(s.validation, Ids{"c3"});
      EXPECT_EQ(s.train, (Ids{"c0", "c1", "c2"}));
      EXPECT_EQ(s.source, "validation list");
      EXPECT_EQ(s.fold.value_or(-1), 0);
    }
  EXPECT_THROW(data::run_split(plan, 0.2, 0, 1), ConfigError);  // one declared fold
}

TEST_F(DatasetSplits, SplitsFinalFoldOneGivesItsValIds) {
  const fs::path root = msd_dataset(dir() / "ds", {"c0", "c1", "c2", "c3"});
  const json folds = json::array(
      {{{"train", {"c1", "c2", "c3"}}, {"val", {"c0"}}}, {{"train", {"c0", "c2", "c3"}}, {"val", {"c1", "c2"}}}});
  test::write_text(root / "splits_final.json", folds.dump());
  data::prepare_dataset(io::load_dataset(root), dir() / "cache");
  const auto plan = data::load_plan(dir() / "cache");
  const auto s = data::run_split(plan, 0.2, 0, 1);
  EXPECT_EQ(s.validation, (Ids{"c1", "c2"}));
  EXPECT_EQ(s.train, (Ids{"c0", "c2", "c3"}));
  EXPECT_EQ(s.source, "splits_final.json");
  EXPECT_EQ(s.file, (root / "splits_final.json").string());
  EXPECT_EQ(s.folds.size(), 2u);
  EXPECT_EQ(data::run_split(plan, 0.2, 0).validation, Ids{"c0"});  // no --fold: fold 0, as nnU-Net
  EXPECT_THROW(data::run_split(plan, 0.2, 0, 2), ConfigError);     // the file has two folds
}

TEST_F(DatasetSplits, SplitsFinalWithAnUnknownCaseNamesTheFileAndTheId) {
  const fs::path root = msd_dataset(dir() / "ds", {"c0", "c1"});
  test::write_text(root / "splits_final.json", R"([{"train": ["c0"], "val": ["liver_7"]}])");
  try {
    io::load_dataset(root / "dataset.json");
    FAIL() << "an unknown case id was accepted";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find((root / "splits_final.json").string()), std::string::npos) << what;
    EXPECT_NE(what.find("liver_7"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST_F(DatasetSplits, FiveFoldsValidateEveryCaseOnceAndNoFoldKeepsTheRandomSplit) {
  const Ids ids{"a", "b", "c", "d", "e", "f", "g", "h"};
  const auto plan = plan_of(ids);
  std::multiset<std::string> validated;
  for (int k = 0; k < data::kFolds; ++k) {
    const auto s = data::run_split(plan, 0.2, 3, k);
    EXPECT_EQ(s.source, "5-fold");
    EXPECT_EQ(s.fold.value_or(-1), k);
    EXPECT_EQ(s.folds.size(), 5u);
    EXPECT_FALSE(s.validation.empty());
    Ids all = s.train;
    all.insert(all.end(), s.validation.begin(), s.validation.end());
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, ids) << "fold " << k;
    validated.insert(s.validation.begin(), s.validation.end());
    EXPECT_EQ(data::run_split(plan, 0.2, 3, k).validation, s.validation);  // deterministic
  }
  EXPECT_EQ(validated, std::multiset<std::string>(ids.begin(), ids.end()));
  const auto random = data::run_split(plan, 0.25, 3);
  EXPECT_EQ(random.source, "random");
  EXPECT_FALSE(random.fold.has_value());
  EXPECT_EQ(random.validation, data::split_cases(ids, 0.25, 3 + 12345).validation);  // today's split
  ASSERT_EQ(random.folds.size(), 1u);
  EXPECT_EQ(random.folds[0].validation, random.validation);
  EXPECT_THROW(data::run_split(plan, 0.2, 3, 5), ConfigError);
  EXPECT_THROW(data::run_split(plan_of({"a", "b", "c"}), 0.2, 3, 0), ConfigError);  // 3 cases, 5 folds
}

TEST_F(DatasetSplits, ImageFolderGroupsNnUNetChannelFilesOnly) {
  for (const char* f : {"a_0000.nii.gz", "a_0001.nii.gz", "b.nii.gz", "scan_2019.nii.gz"})
    io::write_volume(dir() / f, tiny_image(0));
  const auto cases = io::image_folder_cases(dir());
  ASSERT_EQ(cases.size(), 3u);
  EXPECT_EQ(cases[0].id, "a");
  EXPECT_EQ(cases[0].images, (std::vector<fs::path>{dir() / "a_0000.nii.gz", dir() / "a_0001.nii.gz"}));
  EXPECT_EQ(cases[1].id, "b");
  EXPECT_EQ(cases[2].id, "scan_2019");  // no scan_0000: not a channel file
  io::write_volume(dir() / "y_0000.nii.gz", tiny_image(0));
  io::write_volume(dir() / "y_0002.nii.gz", tiny_image(0));
  try {
    io::image_folder_cases(dir());
    FAIL() << "a missing channel was accepted";
  } catch (const DataError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'y'"), std::string::npos) << what;
    EXPECT_NE(what.find("y_0001.nii.gz"), std::string::npos) << what;
  }
}

// ---- as a user runs it ----

// A tiny UNet for a few steps on the CPU (as the reliability tests' tiny_train_args).
std::string tiny_train(const fs::path& dataset, const fs::path& cache, const fs::path& run,
                       const std::string& more = "") {
  return "train --device cpu --threads 1 --dataset '" + dataset.string() + "' --cache '" + cache.string() +
         "' --model unet3d --stages 3 --base-features 4 --max-features 8 --patch 16,16,16 --batch 1 --steps 2 "
         "--loader-threads 1 --no-augment --output '" +
         run.string() + "' " + more;
}

json read_json(const fs::path& p) { return json::parse(std::ifstream(p)); }

bool one_line_error(const test::RunResult& r) {
  return r.exit_code != 0 && r.exit_code < 128 && std::count(r.err.begin(), r.err.end(), '\n') == 1 &&
         r.err.rfind("voxfit: error: ", 0) == 0;
}

class DatasetSplitsCli : public test::TempDirTest {};

TEST_F(DatasetSplitsCli, TrainValidatesOnTheValidationListAndSaysSoInConfigAndSplitsJson) {
  const fs::path root = msd_dataset(dir() / "ds", {"c0", "c1", "c2"}, {"c3"});
  const fs::path run = dir() / "run";
  const auto r = test::run_voxfit(tiny_train(root / "dataset.json", dir() / "cache", run));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto split = read_json(run / "config.json")["split"];
  EXPECT_EQ(split["source"], "validation list") << split.dump();
  EXPECT_EQ(split["fold"], 0);
  EXPECT_EQ(split["validation"], json::array({"c3"}));
  EXPECT_EQ(split["train_cases"], 3);
  EXPECT_EQ(read_json(run / "splits.json"), json::parse(R"([{"train": ["c0", "c1", "c2"], "val": ["c3"]}])"));
}

TEST_F(DatasetSplitsCli, RandomSplitIsWrittenAsSplitsJsonAndFoldFiveIsRefused) {
  const fs::path root = msd_dataset(dir() / "ds", {"c0", "c1", "c2", "c3", "c4"});
  const fs::path run = dir() / "run";
  auto r = test::run_voxfit(tiny_train(root, dir() / "cache", run));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto split = read_json(run / "config.json")["split"];
  EXPECT_EQ(split["source"], "random");
  EXPECT_TRUE(split["fold"].is_null());
  const auto written = read_json(run / "splits.json");
  ASSERT_EQ(written.size(), 1u);
  EXPECT_EQ(written[0]["val"], split["validation"]);
  EXPECT_EQ(written[0]["train"].size() + written[0]["val"].size(), 5u);

  const fs::path run1 = dir() / "run_fold1";
  r = test::run_voxfit(tiny_train(root, dir() / "cache", run1, "--fold 1"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(read_json(run1 / "config.json")["split"]["source"], "5-fold");
  EXPECT_EQ(read_json(run1 / "config.json")["split"]["fold"], 1);
  EXPECT_EQ(read_json(run1 / "splits.json").size(), 5u);

  r = test::run_voxfit(tiny_train(root, dir() / "cache", dir() / "run5", "--fold 5"));
  EXPECT_TRUE(one_line_error(r)) << r.exit_code << ": " << r.err;
  EXPECT_NE(r.err.find("--fold 5"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir() / "run5" / "last.pt"));
}

TEST_F(DatasetSplitsCli, PredictGroupsChannelFilesIntoOneCaseAndRefusesAMissingChannel) {
  const fs::path root = msd_dataset(dir() / "ds", {"c0"}, {}, /*channels=*/2);
  const fs::path run = dir() / "run";
  auto r = test::run_voxfit(tiny_train(root, dir() / "cache", run));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(read_json(run / "config.json")["in_channels"], 2);

  const fs::path in = dir() / "in", out = dir() / "out";
  fs::create_directories(in);
  fs::copy_file(root / "imagesTr" / "c0_0.nii.gz", in / "x_0000.nii.gz");
  fs::copy_file(root / "imagesTr" / "c0_1.nii.gz", in / "x_0001.nii.gz");
  const std::string predict = "predict --device cpu --checkpoint '" + (run / "last.pt").string() + "' --input '";
  r = test::run_voxfit(predict + in.string() + "' --output '" + out.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_TRUE(fs::exists(out / "x.nii.gz"));
  EXPECT_FALSE(fs::exists(out / "x_0000.nii.gz"));
  EXPECT_EQ(std::distance(fs::directory_iterator(out), fs::directory_iterator()), 1);
  EXPECT_EQ(io::read_volume(out / "x.nii.gz").data.sizes().vec(),
            io::read_volume(in / "x_0000.nii.gz").data.sizes().vec());

  const fs::path gap = dir() / "gap";
  fs::create_directories(gap);
  fs::copy_file(in / "x_0000.nii.gz", gap / "y_0000.nii.gz");
  fs::copy_file(in / "x_0001.nii.gz", gap / "y_0002.nii.gz");
  r = test::run_voxfit(predict + gap.string() + "' --output '" + (dir() / "out_gap").string() + "'");
  EXPECT_TRUE(one_line_error(r)) << r.exit_code << ": " << r.err;
  EXPECT_NE(r.err.find("'y'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("y_0001.nii.gz"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir() / "out_gap" / "y.nii.gz"));

  fs::copy_file(in / "x_0001.nii.gz", gap / "y_0001.nii.gz");  // now three channels for a 2-channel network
  r = test::run_voxfit(predict + gap.string() + "' --output '" + (dir() / "out_three").string() + "'");
  EXPECT_TRUE(one_line_error(r)) << r.exit_code << ": " << r.err;
  EXPECT_NE(r.err.find("case 'y' has 3 channel files, the model takes 2"), std::string::npos) << r.err;
}

// The defaults issue 30 measured (docs/performance-notes.md, note 36): --schedule auto is poly for SGD
// (unet3d's default optimiser) and constant for AdamW, and mirroring is p 0.1 an axis; config.json
// records what the run used, and an explicit option wins.
TEST_F(DatasetSplitsCli, ScheduleFollowsTheOptimiserAndMirroringIsOneInTenUnlessTold) {
  const fs::path root = msd_dataset(dir() / "ds", {"c0", "c1"});
  struct Case {
    std::string options, optimizer, schedule;
    double flip;
  };
  const std::vector<Case> cases = {Case{"", "sgd", "poly", 0.1}, Case{"--optimizer adamw", "adamw", "constant", 0.1},
                                   Case{"--optimizer adamw --schedule poly --flip-probability 0.5", "adamw", "poly", 0.5},
                                   Case{"--schedule constant", "sgd", "constant", 0.1}};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const fs::path run = dir() / ("run" + std::to_string(i));
    const auto r = test::run_voxfit(tiny_train(root, dir() / "cache", run, c.options));
    ASSERT_EQ(r.exit_code, 0) << c.options << ": " << r.out << r.err;
    const auto config = read_json(run / "config.json");
    EXPECT_EQ(config["optimizer"], c.optimizer) << c.options;
    EXPECT_EQ(config["schedule"], c.schedule) << c.options;
    EXPECT_EQ(config["augment"]["flip_probability"], c.flip) << c.options;
  }
}

// --augment picks the groups that run; config.json records what the run used.
TEST_F(DatasetSplitsCli, AugmentSetTurnsGroupsOffAndConfigRecordsThem) {
  const fs::path root = msd_dataset(dir() / "ds", {"c0", "c1"});
  struct Case {
    std::string options;
    bool enabled, intensity, spatial;
    double flip;
  };
  const std::vector<Case> cases = {Case{"", true, true, true, 0.1},
                                   Case{"--augment mirror,spatial", true, false, true, 0.1},
                                   Case{"--augment intensity", true, true, false, 0.0},
                                   Case{"--augment spatial,mirror --flip-probability 0.5", true, false, true, 0.5},
                                   Case{"--no-augment", false, false, false, 0.1}};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const fs::path run = dir() / ("aug" + std::to_string(i));
    std::string command = tiny_train(root, dir() / "cache", run, c.options);
    command.erase(command.find("--no-augment "), std::string("--no-augment ").size());  // the tiny run's
    const auto r = test::run_voxfit(command);
    ASSERT_EQ(r.exit_code, 0) << c.options << ": " << r.out << r.err;
    const auto augment = read_json(run / "config.json")["augment"];
    EXPECT_EQ(augment["enabled"], c.enabled) << c.options;
    EXPECT_EQ(augment["intensity"], c.intensity) << c.options;
    EXPECT_EQ(augment["spatial"], c.spatial) << c.options;
    EXPECT_EQ(augment["flip_probability"], c.flip) << c.options;
  }
}

}  // namespace dataset_splits_test
}  // namespace voxfit::train
