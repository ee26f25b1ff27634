// Every valid .nii.gz is read: a gzip file of several members (pigz --independent, bgzip,
// concatenated writers) holds the same NIfTI as a single-member one, and voxfit reads both alike;
// a multi-member file cut short is still refused. voxfit inflates the voxels itself where ITK
// would only copy them, so these also check that reader against ITK's (the plain .nii).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>

#include "reliability/reliability_util.h"
#include "voxfit/core/error.h"
#include "voxfit/io/volume_io.h"

namespace voxfit {
namespace {

// `bytes` gzipped as `members` independent members, concatenated.
void gzip_members_to(const fs::path& p, const std::string& bytes, int members) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  const std::size_t step = bytes.size() / static_cast<std::size_t>(members) + 1;
  for (std::size_t at = 0; at < bytes.size(); at += step) {
    const fs::path part = p.string() + ".part";
    test::gzip_to(part, bytes.substr(at, step));
    out << test::read_file(part);
    fs::remove(part);
  }
}

void expect_same_volume(const Volume& a, const Volume& b) {
  ASSERT_EQ(a.data.sizes(), b.data.sizes());
  EXPECT_EQ(a.data.scalar_type(), b.data.scalar_type());
  EXPECT_TRUE(torch::equal(a.data, b.data));
  EXPECT_EQ(a.geometry.spacing, b.geometry.spacing);
  EXPECT_EQ(a.geometry.origin, b.geometry.origin);
  EXPECT_EQ(a.geometry.direction, b.geometry.direction);
  EXPECT_EQ(a.pixel_type, b.pixel_type);
}

class MultiMemberGzip : public test::TempDirTest {
 protected:
  std::string ct_bytes() const { return test::gunzip(test::totalseg_dir() / "example_ct.nii.gz"); }
};

TEST_F(MultiMemberGzip, RealCtOfThreeMembersLoadsLikeTheSingleMemberFileAndThePlainOne) {
  const std::string raw = ct_bytes();
  ASSERT_GT(raw.size(), 348u);
  const fs::path single = dir() / "single.nii.gz", multi = dir() / "multi.nii.gz", plain = dir() / "plain.nii";
  test::gzip_to(single, raw);
  gzip_members_to(multi, raw, 3);
  test::write_text(plain, raw);
  const Volume from_plain = io::read_volume(plain);  // ITK's reader
  expect_same_volume(io::read_volume(single), from_plain);
  expect_same_volume(io::read_volume(multi), from_plain);
  expect_same_volume(io::read_volume(test::totalseg_dir() / "example_ct.nii.gz"), from_plain);
}

TEST_F(MultiMemberGzip, AMultiMemberFileCutShortIsRefused) {
  const std::string raw = ct_bytes();
  const fs::path multi = dir() / "multi.nii.gz", cut = dir() / "cut.nii.gz";
  gzip_members_to(multi, raw, 3);
  const std::string gz = test::read_file(multi);
  for (const double keep : {0.5, 0.9, 0.999}) {
    test::write_text(cut, gz.substr(0, static_cast<std::size_t>(gz.size() * keep)));
    try {
      (void)io::read_volume(cut);
      FAIL() << "a file cut at " << keep << " was read";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(cut.string() + ": "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("gzip"), std::string::npos) << e.what();
    }
  }
}

TEST_F(MultiMemberGzip, AFlippedByteInTheLastMemberIsRefusedByItsCrc) {
  const std::string raw = ct_bytes();
  const fs::path multi = dir() / "multi.nii.gz";
  gzip_members_to(multi, raw, 2);
  std::string gz = test::read_file(multi);
  gz[gz.size() - 6] = static_cast<char>(gz[gz.size() - 6] ^ 0x40);  // inside the last CRC-32
  test::write_text(multi, gz);
  EXPECT_THROW((void)io::read_volume(multi), IoError);
}

// Float voxels with NaN and Inf are read as stored, once, by voxfit's own inflate (the old path
// inflated twice: ITK, then voxfit to put back what nifti1_io zeroes).
TEST_F(MultiMemberGzip, FloatVolumeKeepsItsNonFiniteValuesAcrossMembers) {
  Volume v = test::small_ct(PixelType::Float32);
  v.data[3][4][5] = std::numeric_limits<float>::quiet_NaN();
  v.data[10][2][1] = std::numeric_limits<float>::infinity();
  const std::string raw = test::nii_bytes(v, dir() / "scratch.nii");
  const fs::path multi = dir() / "f.nii.gz";
  gzip_members_to(multi, raw, 4);
  const Volume back = io::read_volume(multi);
  EXPECT_TRUE(std::isnan(back.data[3][4][5].item<float>()));
  EXPECT_TRUE(std::isinf(back.data[10][2][1].item<float>()));
  EXPECT_EQ(back.data.isfinite().logical_not().sum().item<int64_t>(), 2);
}

// A scaled file (scl_slope 2) is ITK's to read (it rescales); voxfit then inflates the whole file
// once to check its length: multi-member files pass that check too, cut ones fail it.
TEST_F(MultiMemberGzip, ScaledFilesTakeItksPathWithTheSameLengthCheck) {
  std::string raw = test::nii_bytes(test::small_ct(PixelType::Int16), dir() / "scratch.nii");
  const float slope = 2.0f;
  std::memcpy(&raw[112], &slope, 4);
  const fs::path single = dir() / "s.nii.gz", multi = dir() / "m.nii.gz", cut = dir() / "c.nii.gz";
  test::gzip_to(single, raw);
  gzip_members_to(multi, raw, 3);
  const Volume a = io::read_volume(single), b = io::read_volume(multi);
  expect_same_volume(a, b);
  const std::string gz = test::read_file(multi);
  test::write_text(cut, gz.substr(0, gz.size() * 2 / 3));
  EXPECT_THROW((void)io::read_volume(cut), IoError);
}

}  // namespace
}  // namespace voxfit
