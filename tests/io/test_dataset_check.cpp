// `voxfit data check` on datasets with one kind of problem each: the report names the file and
// what was expected, the exit status is 1, and nothing crashes.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "io_test_util.h"
#include "support/test_support.h"
#include "voxfit/io/dataset.h"
#include "voxfit/io/dataset_check.h"
#include "voxfit/io/volume_io.h"

namespace voxfit {
namespace {

namespace fs = std::filesystem;

using test::run_voxfit;

// A small axis-aligned CT-like case: a box of "tissue" with label 1 inside it.
Volume small_image() {
  Volume v;
  v.pixel_type = PixelType::Int16;
  v.data = torch::full({10, 12, 16}, -1000, torch::kInt16);
  v.data.slice(0, 2, 8).slice(1, 3, 9).slice(2, 4, 12).fill_(40);
  v.geometry.spacing = {1.5, 1.5, 3.0};
  v.geometry.origin = {-10.0, 5.0, 100.0};
  return v;
}

Volume small_label() {
  Volume v = small_image();
  v.pixel_type = PixelType::UInt8;
  v.data = torch::zeros({10, 12, 16}, torch::kUInt8);
  v.data.slice(0, 3, 7).slice(1, 4, 8).slice(2, 5, 11).fill_(1);
  return v;
}

class DataCheck : public test::TempDirTest {
 protected:
  // An MSD dataset of `n` good cases: imagesTr/case_K.nii.gz, labelsTr/case_K.nii.gz.
  fs::path msd(int n, const std::map<std::string, std::string>& labels = {{"0", "background"}, {"1", "organ"}}) {
    const fs::path root = dir() / "msd";
    fs::create_directories(root / "imagesTr");
    fs::create_directories(root / "labelsTr");
    std::vector<std::pair<std::string, std::string>> cases;
    for (int k = 0; k < n; ++k) {
      const std::string name = "case_" + std::to_string(k) + ".nii.gz";
      io::write_volume(root / "imagesTr" / name, small_image());
      io::write_volume(root / "labelsTr" / name, small_label());
      cases.push_back({"./imagesTr/" + name, "./labelsTr/" + name});
    }
    test::write_msd_manifest(root, cases, labels);
    return root;
  }
  fs::path image(int k) const { return dir() / "msd" / "imagesTr" / ("case_" + std::to_string(k) + ".nii.gz"); }
  fs::path label(int k) const { return dir() / "msd" / "labelsTr" / ("case_" + std::to_string(k) + ".nii.gz"); }

  // Runs the check; expects exit 1 and a line naming `file` that contains every phrase.
  void expect_problem(const fs::path& root, const fs::path& file, const std::vector<std::string>& phrases) {
    const auto r = run_voxfit("data check '" + root.string() + "'");
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    bool found = false;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind(file.string() + ": ", 0) != 0) continue;
      bool all = true;
      for (const auto& p : phrases) all = all && line.find(p) != std::string::npos;
      found = found || all;
    }
    EXPECT_TRUE(found) << "no line naming " << file << " with every expected phrase in:\n" << r.out << r.err;
  }
};

TEST_F(DataCheck, CleanDatasetsPassWithExitZero) {
  const auto root = msd(2);
  auto r = run_voxfit("data check '" + root.string() + "'");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("OK: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 cases"), std::string::npos) << r.out;
  // The real CT with its TotalSegmentator labels (values read from the file, none declared).
  const auto real = dir() / "real";
  test::link(test::totalseg_dir() / "example_ct_sm.nii.gz", real / "images" / "ct.nii.gz");
  test::link(test::totalseg_dir() / "example_seg.nii.gz", real / "labels" / "ct.nii.gz");
  r = run_voxfit("data check '" + real.string() + "'");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

TEST_F(DataCheck, UnreadableFileIsReported) {
  const auto root = msd(2);
  test::write_text(image(1), std::string(512, 'z'));
  expect_problem(root, image(1), {});
}

TEST_F(DataCheck, TruncatedFileIsReported) {
  const auto root = msd(1);
  test::write_truncated_copy(test::totalseg_dir() / "example_ct_sm.nii.gz", image(0), 0.6);
  expect_problem(root, image(0), {});
}

TEST_F(DataCheck, NonThreeDImageIsReported) {
  const auto root = msd(1);
  const fs::path flat = root / "imagesTr" / "flat.mha";
  test::write_mha(flat, {16, 12});
  test::write_msd_manifest(root, {{"./imagesTr/flat.mha", "./labelsTr/case_0.nii.gz"}}, {{"0", "bg"}, {"1", "organ"}});
  expect_problem(root, flat, {"expected a 3D image", "2D"});
}

class DataCheckGrid : public DataCheck, public ::testing::WithParamInterface<std::string> {};

TEST_P(DataCheckGrid, LabelOnAnotherGridIsReported) {
  const auto root = msd(1);
  Volume l = small_label();
  const std::string aspect = GetParam();
  if (aspect == "size") l.data = torch::zeros({11, 12, 16}, torch::kUInt8).index_fill_(0, torch::tensor({5}), 1);
  if (aspect == "spacing") l.geometry.spacing[2] = 2.5;
  if (aspect == "origin") l.geometry.origin[1] += 4.0;
  if (aspect == "direction") l.geometry.direction = {0, 1, 0, 1, 0, 0, 0, 0, -1};
  io::write_volume(label(0), l);
  expect_problem(root, label(0), {"label grid differs from the image", aspect, "expected the image's"});
}

INSTANTIATE_TEST_SUITE_P(Aspects, DataCheckGrid, ::testing::Values("size", "spacing", "origin", "direction"));

TEST_F(DataCheck, UndeclaredLabelValuesAreReported) {
  const auto root = msd(1);
  Volume l = small_label();
  l.data[0][0][0] = 7;
  l.data[0][0][1] = 9;
  io::write_volume(label(0), l);
  expect_problem(root, label(0), {"label values 7, 9 are not declared", "dataset.json", "declared: 0, 1"});
}

TEST_F(DataCheck, NanAndInfIntensitiesAreReported) {
  const auto root = msd(1);
  Volume v = small_image();
  v.pixel_type = PixelType::Float32;
  v.data = v.data.to(torch::kFloat32);
  v.data[1][2][3] = std::numeric_limits<float>::quiet_NaN();
  v.data[4][5][6] = std::numeric_limits<float>::infinity();
  io::write_volume(image(0), v);
  expect_problem(root, image(0), {"2 voxels are NaN or Inf", "expected finite"});
}

TEST_F(DataCheck, EmptyLabelIsReported) {
  const auto root = msd(2);
  Volume l = small_label();
  l.data.zero_();
  io::write_volume(label(1), l);
  expect_problem(root, label(1), {"no foreground"});
}

TEST_F(DataCheck, ChannelsOnDifferentGridsAreReported) {
  const auto root = dir() / "nn";
  fs::create_directories(root / "imagesTr");
  fs::create_directories(root / "labelsTr");
  io::write_volume(root / "imagesTr" / "c_0000.nii.gz", small_image());
  Volume shifted = small_image();
  shifted.geometry.spacing = {1.0, 1.5, 3.0};
  io::write_volume(root / "imagesTr" / "c_0001.nii.gz", shifted);
  io::write_volume(root / "labelsTr" / "c.nii.gz", small_label());
  test::write_nnunet_manifest(root, {"T1", "T2"}, {{"background", 0}, {"organ", 1}});
  expect_problem(root, root / "imagesTr" / "c_0001.nii.gz",
                 {"channel 1 is on another grid", "spacing", "co-registered"});
}

TEST_F(DataCheck, MissingFilesAreReported) {
  const auto root = msd(2);
  fs::remove(image(0));
  fs::remove(label(1));
  const auto r = run_voxfit("data check '" + root.string() + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find(image(0).string() + ": file not found (image of case 'case_0')"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(label(1).string() + ": file not found (label of case 'case_1')"), std::string::npos) << r.out;
  // nnU-Net layout: a channel file that the channel_names promise.
  const auto nn = dir() / "nn";
  fs::create_directories(nn / "imagesTr");
  fs::create_directories(nn / "labelsTr");
  io::write_volume(nn / "imagesTr" / "c_0000.nii.gz", small_image());
  io::write_volume(nn / "labelsTr" / "c.nii.gz", small_label());
  test::write_nnunet_manifest(nn, {"T1", "T2"}, {{"background", 0}, {"organ", 1}});
  expect_problem(nn, nn / "imagesTr" / "c_0001.nii.gz", {"file not found"});
}

TEST_F(DataCheck, EveryProblemIsReportedAtOnce) {
  const auto root = msd(4);
  test::write_text(image(0), "garbage");
  Volume l = small_label();
  l.data.zero_();
  io::write_volume(label(1), l);
  l.geometry.origin[0] = 50;
  io::write_volume(label(2), l);
  fs::remove(image(3));
  const auto r = run_voxfit("data check '" + root.string() + "'");
  EXPECT_EQ(r.exit_code, 1);
  for (const auto& f : {image(0), label(1), label(2), image(3)})
    EXPECT_NE(r.out.find(f.string() + ": "), std::string::npos) << f << "\n" << r.out;
  EXPECT_NE(r.out.find("problem(s) in"), std::string::npos) << r.out;
  // The library call reports the same, without throwing.
  const io::CheckReport report = io::check_dataset(io::load_dataset(root));
  EXPECT_GE(report.problems.size(), 5u);
}

TEST_F(DataCheck, MissingDatasetIsOneLineError) {
  const auto r = run_voxfit("data check '" + (dir() / "nothing").string() + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("nothing"), std::string::npos) << r.err;
  EXPECT_EQ(run_voxfit("data check").exit_code, 2);
  EXPECT_EQ(run_voxfit("data").exit_code, 2);
  EXPECT_EQ(run_voxfit("data frobnicate").exit_code, 2);
}

}  // namespace
}  // namespace voxfit
