#include <gtest/gtest.h>
#include <torch/torch.h>

#include "io_test_util.h"
#include "support/test_support.h"
#include "voxfit/core/error.h"
#include "voxfit/io/volume_io.h"

namespace voxfit {
namespace {

namespace fs = std::filesystem;

using test::totalseg_dir;

class VolumeIo : public test::TempDirTest {};

const char* kExtensions[] = {".nii", ".nii.gz", ".mha", ".mhd", ".nrrd", ".nhdr"};

void expect_same_volume(const Volume& a, const Volume& b, const std::string& what) {
  EXPECT_EQ(grid_difference(a, b), "") << what;
  EXPECT_EQ(a.pixel_type, b.pixel_type) << what << ": " << to_string(a.pixel_type) << " vs " << to_string(b.pixel_type);
  ASSERT_EQ(a.data.sizes(), b.data.sizes()) << what;
  EXPECT_TRUE(torch::equal(a.data, b.data)) << what;
}

TEST_F(VolumeIo, RealCtReadsWithItsGridAndType) {
  const Volume ct = io::read_volume(totalseg_dir() / "example_ct_sm.nii.gz");
  EXPECT_EQ(ct.size(), (std::array<std::int64_t, 3>{122, 101, 30}));
  EXPECT_EQ(ct.pixel_type, PixelType::Int16);
  for (double s : ct.spacing()) EXPECT_NEAR(s, 3.0, 1e-3);
  // HU: air near -1000, bone above +200.
  EXPECT_LT(ct.data.min().item<int>(), -900);
  EXPECT_GT(ct.data.max().item<int>(), 200);
  const Volume seg = io::read_volume(totalseg_dir() / "example_seg.nii.gz");
  EXPECT_EQ(grid_difference(ct, seg), "");
  EXPECT_EQ(seg.pixel_type, PixelType::UInt8);
}

TEST_F(VolumeIo, HeaderInfoMatchesTheVoxels) {
  const auto file = totalseg_dir() / "example_ct.nii.gz";
  const io::ImageInfo info = io::read_image_info(file);
  const Volume v = io::read_volume(file);
  EXPECT_EQ(info.dimension, 3u);
  EXPECT_EQ(info.format, "NIfTI");
  EXPECT_EQ(info.channels(), 1);
  EXPECT_EQ(info.size3(), v.size());
  EXPECT_EQ(info.size3(), (std::array<std::int64_t, 3>{122, 101, 112}));
  EXPECT_EQ(info.pixel_type, PixelType::Int32);
  EXPECT_EQ(grid_difference(info.size3(), info.geometry, v.size(), v.geometry), "");
}

TEST_F(VolumeIo, RealCtRoundTripsThroughEveryFormat) {
  const Volume ct = io::read_volume(totalseg_dir() / "example_ct_sm.nii.gz");
  for (const char* ext : kExtensions) {
    const auto file = dir() / (std::string("ct") + ext);
    io::write_volume(file, ct);
    expect_same_volume(ct, io::read_volume(file), ext);
  }
}

TEST_F(VolumeIo, DemoMriAndItsSegmentationRoundTrip) {
  const Volume mri = io::read_volume(test::demo_mri_dir() / "KmeansTest_T1RawSkullStrip.nii.gz");
  const Volume seg = io::read_volume(test::demo_mri_dir() / "KmeansTest_T1KmeansPrelimSegmentation.nii.gz");
  EXPECT_EQ(grid_difference(mri, seg), "");
  const auto values = std::get<0>(torch::_unique(seg.data.to(torch::kInt64).flatten()));
  EXPECT_GE(values.numel(), 3);
  for (const char* ext : {".nrrd", ".mha", ".nii.gz"}) {
    io::write_volume(dir() / (std::string("seg") + ext), seg);
    expect_same_volume(seg, io::read_volume(dir() / (std::string("seg") + ext)), ext);
  }
}

TEST_F(VolumeIo, SyntheticVolumesKeepObliqueGeometryAndEveryPixelType) {
  for (PixelType t : {PixelType::UInt8, PixelType::Int8, PixelType::UInt16, PixelType::Int16, PixelType::Int32,
                      PixelType::UInt32, PixelType::Float32, PixelType::Float64}) {
    const Volume v = test::synthetic_volume(t);
    for (const char* ext : kExtensions) {
      const auto file = dir() / ("v_" + to_string(t) + ext);
      io::write_volume(file, v, /*compress=*/std::string(ext) != ".nrrd");
      expect_same_volume(v, io::read_volume(file), to_string(t) + ext);
    }
  }
}

TEST_F(VolumeIo, WriteLeavesNoStagingFilesBehind) {
  io::write_volume(dir() / "a.mhd", test::synthetic_volume(PixelType::Int16));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir())) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0], "a.mhd");
  EXPECT_EQ(fs::path(names[1]).extension(), ".zraw");
}

TEST_F(VolumeIo, DicomSeriesReadsTwentySlicesInPositionOrder) {
  const auto folder = totalseg_dir() / "example_ct_dicom";
  const auto series = io::list_dicom_series(folder);
  ASSERT_EQ(series.size(), 1u);
  ASSERT_EQ(series[0].files.size(), 20u);
  const Volume ct = io::read_dicom_series(folder);
  EXPECT_EQ(ct.size(), (std::array<std::int64_t, 3>{512, 512, 20}));
  EXPECT_NEAR(ct.spacing()[0], 0.977, 0.01);
  EXPECT_NEAR(ct.spacing()[2], 2.0, 0.01);
  // Each listed slice sits one slice spacing further along the slice normal than the one before.
  const std::array<double, 3> normal{ct.direction()[2], ct.direction()[5], ct.direction()[8]};
  double previous = -1e9;
  for (std::size_t i = 0; i < series[0].files.size(); ++i) {
    const auto o = io::read_image_info(series[0].files[i]).geometry.origin;
    const double along = o[0] * normal[0] + o[1] * normal[1] + o[2] * normal[2];
    if (i > 0) {
      EXPECT_NEAR(along - previous, ct.spacing()[2], 0.01) << series[0].files[i];
    } else {
      for (int a = 0; a < 3; ++a) EXPECT_NEAR(o[a], ct.origin()[a], 1e-3);
    }
    previous = along;
  }
  // The label map that comes with the series lies on the same voxel grid.
  const Volume seg = io::read_volume(totalseg_dir() / "example_seg_dicom.nii.gz");
  EXPECT_EQ(seg.size(), ct.size());
  EXPECT_EQ(io::read_channels(folder).size(), 1u);
}

TEST_F(VolumeIo, DicomFolderWithTwoSeriesIsPickedByUid) {
  Volume a = test::synthetic_volume(PixelType::Int16, {6, 5, 4});
  a.geometry.direction = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  Volume b = a;
  b.data = a.data + 1000;
  io::write_dicom_series(dir() / "mixed", a, "1.2.826.0.1.3680043.2.1125.1");
  io::write_dicom_series(dir() / "b_only", b, "1.2.826.0.1.3680043.2.1125.2");
  for (const auto& e : fs::directory_iterator(dir() / "b_only"))
    fs::copy_file(e.path(), dir() / "mixed" / ("b_" + e.path().filename().string()));
  const auto series = io::list_dicom_series(dir() / "mixed");
  ASSERT_EQ(series.size(), 2u);
  try {
    io::read_dicom_series(dir() / "mixed");
    ADD_FAILURE() << "two series without a UID must be an error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("FOLDER#UID"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1.2.826.0.1.3680043.2.1125.2"), std::string::npos) << e.what();
  }
  const Volume rb = io::read_dicom_series(dir() / "mixed", "1.2.826.0.1.3680043.2.1125.2");
  EXPECT_EQ(rb.size(), b.size());
  EXPECT_TRUE(torch::equal(rb.data.to(torch::kInt32), b.data.to(torch::kInt32)));
  EXPECT_EQ(grid_difference(rb, b), "");
  const Volume ra = io::read_volume((dir() / "mixed").string() + "#1.2.826.0.1.3680043.2.1125.1");
  EXPECT_TRUE(torch::equal(ra.data.to(torch::kInt32), a.data.to(torch::kInt32)));
  EXPECT_THROW(io::read_dicom_series(dir() / "mixed", "9.9.9"), IoError);
}

TEST_F(VolumeIo, RealDicomSeriesRoundTripsAsANewSeries) {
  const Volume ct = io::read_dicom_series(totalseg_dir() / "example_ct_dicom");
  io::write_dicom_series(dir() / "copy", ct, "1.2.826.0.1.3680043.2.1125.77");
  const Volume back = io::read_dicom_series(dir() / "copy");
  EXPECT_EQ(grid_difference(ct, back), "");
  EXPECT_TRUE(torch::equal(ct.data.to(torch::kInt32), back.data.to(torch::kInt32)));
}

TEST_F(VolumeIo, BadFilesAreIoErrorsNamingThePath) {
  const auto missing = dir() / "nope.nii.gz";
  try {
    io::read_volume(missing);
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(missing.string()), std::string::npos);
  }
  test::write_text(dir() / "garbage.nii.gz", std::string(300, 'x'));
  EXPECT_THROW(io::read_volume(dir() / "garbage.nii.gz"), IoError);
  test::write_truncated_copy(totalseg_dir() / "example_ct_sm.nii.gz", dir() / "cut.nii.gz", 0.5);
  EXPECT_THROW(io::read_volume(dir() / "cut.nii.gz"), IoError);
  test::write_mha(dir() / "flat.mha", {8, 8});
  try {
    io::read_volume(dir() / "flat.mha");
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("expected a 3D image"), std::string::npos) << e.what();
  }
  EXPECT_THROW(io::write_volume(dir() / "x.png", test::synthetic_volume(PixelType::UInt8)), IoError);
}

TEST_F(VolumeIo, FlippedOrTransposedCopiesShareVoxelCentres) {
  const Volume v = test::synthetic_volume(PixelType::Int16);
  const auto s = v.size();
  // The same voxels stored with y reversed: origin at the last row, y direction negated.
  Geometry flipped = v.geometry;
  flipped.origin = v.geometry.index_to_point({0.0, static_cast<double>(s[1] - 1), 0.0});
  for (int r = 0; r < 3; ++r) flipped.direction[r * 3 + 1] = -v.geometry.direction[r * 3 + 1];
  EXPECT_NE(grid_difference(s, v.geometry, s, flipped), "");
  EXPECT_TRUE(same_voxel_centres(s, v.geometry, s, flipped));
  // x and y swapped.
  Geometry swapped = v.geometry;
  std::array<std::int64_t, 3> swapped_size{s[1], s[0], s[2]};
  std::swap(swapped.spacing[0], swapped.spacing[1]);
  for (int r = 0; r < 3; ++r) std::swap(swapped.direction[r * 3 + 0], swapped.direction[r * 3 + 1]);
  EXPECT_TRUE(same_voxel_centres(s, v.geometry, swapped_size, swapped));
  // Half a voxel off, or another spacing, is another grid.
  Geometry shifted = v.geometry;
  shifted.origin[2] += 0.5 * v.geometry.spacing[2];
  EXPECT_FALSE(same_voxel_centres(s, v.geometry, s, shifted));
  Geometry finer = v.geometry;
  finer.spacing[0] *= 0.5;
  EXPECT_FALSE(same_voxel_centres(s, v.geometry, s, finer));
  EXPECT_FALSE(same_voxel_centres(s, v.geometry, {s[0], s[1], s[2] + 1}, v.geometry));
  // The real DICOM series and its NIfTI label map are such a pair (rows stored in opposite order).
  const Volume ct = io::read_dicom_series(totalseg_dir() / "example_ct_dicom");
  const io::ImageInfo seg = io::read_image_info(totalseg_dir() / "example_seg_dicom.nii.gz");
  EXPECT_TRUE(same_voxel_centres(ct.size(), ct.geometry, seg.size3(), seg.geometry))
      << grid_difference(ct.size(), ct.geometry, seg.size3(), seg.geometry);
}

TEST_F(VolumeIo, FourDFileGivesOneVolumePerChannel) {
  test::write_mha(dir() / "four.mha", {5, 4, 3, 2});
  const Channels c = io::read_channels(dir() / "four.mha");
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[1].size(), (std::array<std::int64_t, 3>{5, 4, 3}));
  EXPECT_THROW(io::read_volume(dir() / "four.mha"), IoError);
}

}  // namespace
}  // namespace voxfit
