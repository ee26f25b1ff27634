#include <gtest/gtest.h>

#include "io_test_util.h"
#include "support/test_support.h"
#include "voxfit/core/error.h"
#include "voxfit/io/dataset.h"
#include "voxfit/io/volume_io.h"

namespace voxfit {
namespace {

namespace fs = std::filesystem;

using test::totalseg_dir;

class Dataset : public test::TempDirTest {};

TEST_F(Dataset, MsdManifestListsCasesLabelsAndModalities) {
  const auto root = dir() / "msd";
  test::link(totalseg_dir() / "example_ct_sm.nii.gz", root / "imagesTr" / "ct_a.nii.gz");
  test::link(totalseg_dir() / "example_seg.nii.gz", root / "labelsTr" / "ct_a.nii.gz");
  test::write_msd_manifest(
      root, {{"./imagesTr/ct_a.nii.gz", "./labelsTr/ct_a.nii.gz"}, {"../ct_dicom", "./labelsTr/d.nii.gz"}},
      {{"0", "background"}, {"1", "spleen"}, {"5", "liver"}});
  const io::Dataset d = io::load_dataset(root);
  EXPECT_EQ(d.layout, io::DatasetLayout::Msd);
  EXPECT_EQ(d.name, "TestMSD");
  EXPECT_EQ(d.channel_names, std::vector<std::string>{"CT"});
  EXPECT_EQ(d.labels.size(), 3u);
  EXPECT_EQ(d.labels.at(5), "liver");
  ASSERT_EQ(d.cases.size(), 2u);
  EXPECT_EQ(d.cases[0].id, "ct_a");
  EXPECT_EQ(d.cases[0].images[0], root / "imagesTr" / "ct_a.nii.gz");
  EXPECT_EQ(d.cases[1].images[0], dir() / "ct_dicom");
  // The manifest file itself works as the dataset path too.
  EXPECT_EQ(io::load_dataset(root / "dataset.json").cases.size(), 2u);
  const Channels c = io::read_case_channels(d, d.cases[0]);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].size(), (std::array<std::int64_t, 3>{122, 101, 30}));
}

TEST_F(Dataset, NnUNetLayoutFindsChannelsBySuffix) {
  const auto root = dir() / "Dataset001_Test";
  for (const char* id : {"ct_001", "ct_002"}) {
    test::link(totalseg_dir() / "example_ct_sm.nii.gz", root / "imagesTr" / (std::string(id) + "_0000.nii.gz"));
    test::link(totalseg_dir() / "example_ct_sm.nii.gz", root / "imagesTr" / (std::string(id) + "_0001.nii.gz"));
    test::link(totalseg_dir() / "example_seg.nii.gz", root / "labelsTr" / (std::string(id) + ".nii.gz"));
  }
  test::write_nnunet_manifest(root, {"CT", "CT2"}, {{"background", 0}, {"spleen", 1}});
  const io::Dataset d = io::load_dataset(root);
  EXPECT_EQ(d.layout, io::DatasetLayout::NnUNetV2);
  ASSERT_EQ(d.cases.size(), 2u);
  EXPECT_EQ(d.cases[1].id, "ct_002");
  ASSERT_EQ(d.cases[1].images.size(), 2u);
  EXPECT_EQ(d.cases[1].images[1].filename(), "ct_002_0001.nii.gz");
  EXPECT_EQ(d.cases[1].label->filename(), "ct_002.nii.gz");
  EXPECT_EQ(d.labels.at(1), "spleen");
  EXPECT_EQ(io::read_case_channels(d, d.cases[0]).size(), 2u);
}

TEST_F(Dataset, PlainFoldersPairImagesWithLabels) {
  const auto a = dir() / "pairs";
  test::link(totalseg_dir() / "example_ct_sm.nii.gz", a / "images" / "one.nii.gz");
  test::link(totalseg_dir() / "example_seg.nii.gz", a / "labels" / "one.nii.gz");
  io::Dataset d = io::load_dataset(a);
  EXPECT_EQ(d.layout, io::DatasetLayout::Folder);
  ASSERT_EQ(d.cases.size(), 1u);
  EXPECT_EQ(d.cases[0].label, a / "labels" / "one.nii.gz");
  EXPECT_TRUE(d.labels.empty());

  const auto b = dir() / "flat";
  test::link(totalseg_dir() / "example_ct_sm.nii.gz", b / "x.nii.gz");
  test::link(totalseg_dir() / "example_seg.nii.gz", b / "x_seg.nii.gz");
  test::link(totalseg_dir() / "example_mr_sm.nii.gz", b / "y.nii.gz");
  d = io::load_dataset(b);
  ASSERT_EQ(d.cases.size(), 2u);
  EXPECT_EQ(d.cases[0].label, b / "x_seg.nii.gz");
  // An image without a label keeps the expected label path, so checks can name it.
  EXPECT_EQ(d.cases[1].label, b / "y_label.nii.gz");
}

TEST_F(Dataset, Hdf5FolderReadsImageAndLabelDatasets) {
  const Volume ct = io::read_volume(totalseg_dir() / "example_ct_sm.nii.gz");
  const Volume seg = io::read_volume(totalseg_dir() / "example_seg.nii.gz");
  io::H5Names names{"img", "seg"};
  fs::create_directories(dir() / "h5");
  io::write_h5_case(dir() / "h5" / "c1.h5", {ct}, &seg, names);
  io::DatasetOptions o;
  o.h5_names = names;
  const io::Dataset d = io::load_dataset(dir() / "h5", o);
  EXPECT_EQ(d.layout, io::DatasetLayout::Hdf5Folder);
  ASSERT_EQ(d.cases.size(), 1u);
  EXPECT_EQ(d.cases[0].id, "c1");
  EXPECT_TRUE(torch::equal(io::read_case_channels(d, d.cases[0])[0].data, ct.data));
  EXPECT_TRUE(torch::equal(io::read_case_label(d, *d.cases[0].label).data, seg.data));
}

TEST_F(Dataset, MalformedManifestsAreConfigErrorsNamingFileAndField) {
  fs::create_directories(dir() / "a");
  test::write_text(dir() / "a" / "dataset.json", "{ not json");
  EXPECT_THROW(io::load_dataset(dir() / "a"), ConfigError);
  test::write_text(dir() / "a" / "dataset.json", R"({"training": "x"})");
  EXPECT_THROW(io::load_dataset(dir() / "a"), ConfigError);
  test::write_text(dir() / "a" / "dataset.json",
                   R"({"channel_names": {"0": "CT"}, "file_ending": ".nii.gz", "labels": {"a": [1, 2]}})");
  try {
    io::load_dataset(dir() / "a");
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("dataset.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("region-based"), std::string::npos) << e.what();
  }
  test::write_text(dir() / "a" / "dataset.json", R"({"labels": {"x": "y"}, "training": []})");
  EXPECT_THROW(io::load_dataset(dir() / "a"), ConfigError);
  fs::create_directories(dir() / "empty");
  EXPECT_THROW(io::load_dataset(dir() / "empty"), IoError);
  EXPECT_THROW(io::load_dataset(dir() / "missing"), IoError);
}

}  // namespace
}  // namespace voxfit
