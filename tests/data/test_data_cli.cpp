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
  r = run_voxfit("data prepare '" + root.string() + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--output"), std::string::npos);
}

TEST_F(DataCli, BenchPrintsOneRowPerThreadCount) {
  const auto root = test::mri_nnunet_dataset(dir() / "mri", 1);
  ASSERT_EQ(run_voxfit("data prepare '" + root.string() + "' -q -o '" + (dir() / "cache").string() + "'").exit_code, 0);
  const auto r = run_voxfit("data bench '" + (dir() / "cache").string() + "' --patch 32 --batch 2 --threads 1,2 --seconds 0.5");
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
  EXPECT_NE(r.err.find("KmeansTest_T1RawSkullStrip"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace voxfit
