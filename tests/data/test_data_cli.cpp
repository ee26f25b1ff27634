#include <gtest/gtest.h>

#include "data/data_test_util.h"
#include "voxfit/data/plan.h"

namespace voxfit {
namespace {

namespace fs = std::filesystem;

using test::run_voxfit;

class DataCli : public test::TempDirTest {};

TEST_F(DataCli, PrepareWritesTheCacheAndReusesIt) {
  const auto root = test::ct_msd_dataset(dir() / "ct");
  const std::string cmd = "data prepare '" + root.string() + "' --output '" + (dir() / "cache").string() + "'";
  auto r = run_voxfit(cmd + " --spacing 3");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("2 written"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ct, clip"), std::string::npos) << r.out;
  const data::Plan plan = data::load_plan(dir() / "cache");
  EXPECT_EQ(plan.target_spacing, (std::array<double, 3>{3.0, 3.0, 3.0}));
  r = run_voxfit(cmd + " --spacing 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("up to date"), std::string::npos) << r.out;
  r = run_voxfit(cmd + " --spacing 3,x,1");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  // Three values come in the axis order of --patch, D,H,W; the plan keeps ITK's x, y, z.
  r = run_voxfit("data prepare '" + root.string() + "' -q --output '" + (dir() / "aniso").string() + "' --spacing 6,3,4.5");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("spacing 6 x 3 x 4.5 mm (D x H x W)"), std::string::npos) << r.out;
  EXPECT_EQ(data::load_plan(dir() / "aniso").target_spacing, (std::array<double, 3>{4.5, 3.0, 6.0}));
  r = run_voxfit("data prepare '" + root.string() + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--output"), std::string::npos);
}

TEST_F(DataCli, BenchPrintsOneRowPerThreadCount) {
  const auto root = test::mri_nnunet_dataset(dir() / "mri", 1);
  ASSERT_EQ(run_voxfit("data prepare '" + root.string() + "' -q -o '" + (dir() / "cache").string() + "'").exit_code, 0);
  const auto r = run_voxfit("data bench '" + (dir() / "cache").string() + "' --patch 32 --batch 2 --loader-threads 1,2 --seconds 0.5");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("patches/s"), std::string::npos) << r.out;
  int rows = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    int threads = 0;
    long long patches = 0;
    double rate = 0;
    if (std::sscanf(line.c_str(), "%d %lld %lf", &threads, &patches, &rate) == 3) {
      ++rows;
      EXPECT_GT(patches, 0) << line;
      EXPECT_GT(rate, 0.0) << line;
    }
  }
  EXPECT_EQ(rows, 2) << r.out;
}

TEST_F(DataCli, DemoDatasetChecksPreparesAndLoads) {
  auto r = run_voxfit("data demo '" + (dir() / "demo").string() + "' --cases 3 --mri-dir '" +
                      test::demo_mri_dir().string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_voxfit("data check '" + (dir() / "demo").string() + "'");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("3 cases"), std::string::npos) << r.out;
  r = run_voxfit("data prepare '" + (dir() / "demo").string() + "' -q -o '" + (dir() / "cache").string() + "'");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(data::load_plan(dir() / "cache").cases.size(), 3u);
  r = run_voxfit("data demo '" + (dir() / "x").string() + "' --mri-dir '" + dir().string() + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("KmeansTest_T1UCharRaw"), std::string::npos) << r.err;
}

// The demo's image is the T1 scan: labels 1-3 of the k-means segmentation have distinct
// intensities there (means about 1, 43 and 80). The skull-strip mask beside it, which the demo
// took before, is 0 over all three, so nothing could learn them from it.
TEST_F(DataCli, DemoImageTellsTheLabelsApart) {
  ASSERT_EQ(run_voxfit("data demo '" + (dir() / "demo").string() + "' --cases 1 --mri-dir '" +
                       test::demo_mri_dir().string() + "'").exit_code, 0);
  const auto image = io::read_volume(dir() / "demo" / "imagesTr" / "demo_000.nii.gz").data.to(torch::kDouble);
  const auto label = io::read_volume(dir() / "demo" / "labelsTr" / "demo_000.nii.gz").data;
  ASSERT_EQ(image.sizes(), label.sizes());
  std::vector<double> mean;
  for (int k = 1; k <= 3; ++k) mean.push_back(image.masked_select(label == k).mean().item<double>());
  EXPECT_GT(mean[1] - mean[0], 20.0) << mean[0] << " " << mean[1];
  EXPECT_GT(mean[2] - mean[1], 20.0) << mean[1] << " " << mean[2];
  EXPECT_GE(image.max().item<double>(), 200.0);  // 8-bit range, not a handful of mask values
}

}  // namespace
}  // namespace voxfit
