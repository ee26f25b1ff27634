#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <random>
#include <thread>

#include "io_test_util.h"
#include "support/test_support.h"
#include "voxfit/core/error.h"
#include "voxfit/io/h5_file.h"
#include "voxfit/io/volume_io.h"

namespace voxfit {
namespace {

namespace fs = std::filesystem;

class H5File : public test::TempDirTest {};

TEST_F(H5File, RealCaseRoundTripsWithGeometryAndPixelType) {
  const Volume ct = io::read_volume(test::totalseg_dir() / "example_ct_sm.nii.gz");
  const Volume seg = io::read_volume(test::totalseg_dir() / "example_seg.nii.gz");
  const auto file = dir() / "case.h5";
  io::write_h5_case(file, {ct}, &seg);
  const Channels back = io::read_h5_channels(file, "image");
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(grid_difference(back[0], ct), "");
  EXPECT_EQ(back[0].pixel_type, PixelType::Int16);
  EXPECT_TRUE(torch::equal(back[0].data, ct.data));
  const Volume l = io::read_h5_volume(file, "label");
  EXPECT_EQ(grid_difference(l, seg), "");
  EXPECT_EQ(l.pixel_type, PixelType::UInt8);
  EXPECT_TRUE(torch::equal(l.data, seg.data));
}

TEST_F(H5File, CustomDatasetNamesAndSeveralChannels) {
  const Volume a = test::synthetic_volume(PixelType::Float32);
  Volume b = a;
  b.data = a.data * 2;
  io::H5Names names;
  names.image = "ct";
  names.label = "seg";
  const Volume l = test::synthetic_volume(PixelType::UInt8);
  io::write_h5_case(dir() / "c.h5", {a, b}, &l, names);
  const Channels back = io::read_h5_channels(dir() / "c.h5", "ct");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_TRUE(torch::equal(back[1].data, b.data));
  EXPECT_EQ(grid_difference(back[1], a), "");
  EXPECT_THROW(io::read_h5_volume(dir() / "c.h5", "label"), IoError);
  EXPECT_NO_THROW(io::read_h5_volume(dir() / "c.h5", "seg"));
}

TEST_F(H5File, HyperslabBoxesEqualCropsOfTheFullRead) {
  const Volume ct = io::read_volume(test::totalseg_dir() / "example_ct.nii.gz");
  const torch::Tensor full = ct.data.to(torch::kFloat32).unsqueeze(0).contiguous();
  {
    io::H5Writer w(dir() / "chunked.h5");
    w.write("image", full, {{1, 16, 32, 32}, 0});
    w.write("zipped", full, {{1, 16, 32, 32}, 4});
    w.write("contiguous", full);  // raw chunked and contiguous are copied from a file mapping
    w.write("label", full.clamp(-100, 300).to(torch::kInt16), {{1, 8, 16, 64}, 0});
    w.commit();
  }
  const io::H5Reader r(dir() / "chunked.h5");
  EXPECT_EQ(r.shape("image"), full.sizes().vec());
  std::mt19937 rng(7);
  for (int i = 0; i < 40; ++i) {
    std::vector<std::int64_t> start{0}, count{1};
    for (int a = 1; a < 4; ++a) {
      const std::int64_t n = full.size(a);
      const std::int64_t c = 1 + static_cast<std::int64_t>(rng() % static_cast<unsigned>(n));
      count.push_back(c);
      start.push_back(static_cast<std::int64_t>(rng() % static_cast<unsigned>(n - c + 1)));
    }
    const torch::Tensor expected = full.slice(1, start[1], start[1] + count[1])
                                       .slice(2, start[2], start[2] + count[2])
                                       .slice(3, start[3], start[3] + count[3]);
    EXPECT_TRUE(torch::equal(r.read_box("image", start, count), expected)) << "box " << i;
    EXPECT_TRUE(torch::equal(r.read_box("zipped", start, count), expected)) << "box " << i;
    EXPECT_TRUE(torch::equal(r.read_box("contiguous", start, count), expected)) << "box " << i;
    EXPECT_TRUE(torch::equal(r.read_box("label", start, count), expected.clamp(-100, 300).to(torch::kInt16)))
        << "box " << i;
  }
  // A box can land straight in a caller's tensor in another dtype.
  torch::Tensor out = torch::empty({1, 4, 5, 6}, torch::kFloat64);
  r.read_box_into("image", {0, 10, 20, 30}, {1, 4, 5, 6}, out);
  EXPECT_TRUE(torch::equal(out, full.slice(1, 10, 14).slice(2, 20, 25).slice(3, 30, 36).to(torch::kFloat64)));
  EXPECT_THROW(r.read_box("image", {0, 110, 0, 0}, {1, 5, 1, 1}), IoError);
  EXPECT_THROW(r.read_box("image", {0, 0, 0}, {1, 1, 1}), IoError);
  EXPECT_THROW(r.read_box("nothing", {0, 0, 0, 0}, {1, 1, 1, 1}), IoError);
}

TEST_F(H5File, BoxReadsFromManyThreadsAgreeWithTheFullRead) {
  const torch::Tensor data = torch::randn({1, 40, 50, 60});
  {
    io::H5Writer w(dir() / "t.h5");
    w.write("image", data, {{1, 16, 16, 16}, 0});
    w.commit();
  }
  const io::H5Reader r(dir() / "t.h5");
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      for (int i = 0; i < 30; ++i) {
        const std::int64_t z = rng() % 30, y = rng() % 40, x = rng() % 50;
        const torch::Tensor box = r.read_box("image", {0, z, y, x}, {1, 10, 10, 10});
        if (!torch::equal(box, data.slice(1, z, z + 10).slice(2, y, y + 10).slice(3, x, x + 10))) ++mismatches;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST_F(H5File, AttributesRoundTrip) {
  {
    io::H5Writer w(dir() / "a.h5");
    w.write("x", torch::arange(6, torch::kInt32).view({2, 3}));
    w.set_attribute("/", "case_id", "abc");
    w.set_attribute("x", "values", std::vector<double>{1.5, -2.0});
    w.commit();
  }
  const io::H5Reader r(dir() / "a.h5");
  EXPECT_EQ(r.string_attribute("/", "case_id"), std::optional<std::string>("abc"));
  EXPECT_EQ(r.double_attribute("x", "values"), (std::optional<std::vector<double>>(std::vector<double>{1.5, -2.0})));
  EXPECT_FALSE(r.string_attribute("/", "missing").has_value());
  EXPECT_FALSE(r.geometry("x").has_value());
  EXPECT_TRUE(torch::equal(r.read("x"), torch::arange(6, torch::kInt32).view({2, 3})));
}

TEST_F(H5File, UncommittedWriterLeavesNothingAndBadFilesAreIoErrors) {
  {
    io::H5Writer w(dir() / "never.h5");
    w.write("x", torch::zeros({3}));
  }
  EXPECT_TRUE(fs::is_empty(dir()));
  test::write_text(dir() / "junk.h5", "not an hdf5 file at all");
  try {
    io::H5Reader r(dir() / "junk.h5");
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("junk.h5"), std::string::npos);
  }
  io::write_h5_case(dir() / "ok.h5", {test::synthetic_volume(PixelType::Float32, {20, 20, 20})}, nullptr);
  test::write_truncated_copy(dir() / "ok.h5", dir() / "cut.h5", 0.4);
  EXPECT_THROW(io::read_h5_channels(dir() / "cut.h5", "image"), IoError);
}

}  // namespace
}  // namespace voxfit

namespace voxfit::io {
namespace {

// survive_h5_read: what the child does decides; the parent carries on either way.
class SurviveH5Read : public test::TempDirTest {
 protected:
  fs::path file() const { return dir() / "case.h5"; }
  std::string message_of(const std::function<void()>& read, double timeout_s = 30) {
    try {
      survive_h5_read(file(), read, timeout_s);
    } catch (const IoError& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(SurviveH5Read, ACrashInTheChildIsAOneLineErrorNamingTheFile) {
  const std::string m = message_of([] { std::raise(SIGSEGV); });
  EXPECT_EQ(m.rfind(file().string() + ": not a readable HDF5 volume (the HDF5 library crashed on it: signal 11", 0), 0u)
      << m;
  EXPECT_EQ(m.find('\n'), std::string::npos);
}

TEST_F(SurviveH5Read, AnAbortOrASanitizersExitIsACrashToo) {
  EXPECT_NE(message_of([] { std::abort(); }).find("crashed on it: signal 6"), std::string::npos);
  EXPECT_NE(message_of([] { ::_exit(1); }).find("crashed on it: exit status 1"), std::string::npos);
}

TEST_F(SurviveH5Read, AChildStillReadingAfterTheTimeoutIsKilledAndReported) {
  const auto start = std::chrono::steady_clock::now();
  const std::string m = message_of([] { std::this_thread::sleep_for(std::chrono::seconds(60)); }, 0.5);
  EXPECT_NE(m.find("not a readable HDF5 volume (the HDF5 library hung on it: still reading after 0.5 s)"),
            std::string::npos)
      << m;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST_F(SurviveH5Read, ErrorsHdf5ReportsAreLeftToTheCallersOwnRead) {
  EXPECT_EQ(message_of([] { throw IoError("x.h5: no such dataset"); }), "");
  EXPECT_EQ(message_of([] {}), "");
}

TEST_F(SurviveH5Read, HDF5StillWorksInTheParentAfterAChildCrashed) {
  const torch::Tensor image = torch::rand({6, 5, 4});
  {
    H5Writer w(file());
    w.write("image", image);
    w.commit();
  }
  (void)message_of([] { std::raise(SIGSEGV); });
  survive_h5_case(file(), H5Names{});
  const Channels c = read_h5_channels(file(), "image");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_TRUE(torch::equal(c[0].data, image));
}

TEST_F(SurviveH5Read, TrustHdf5SkipsTheChild) {
  ::setenv("VOXFIT_TRUST_HDF5", "1", 1);
  const std::string trusted = message_of([] { std::raise(SIGSEGV); });  // never run, so no crash
  ::unsetenv("VOXFIT_TRUST_HDF5");
  EXPECT_EQ(trusted, "");
  EXPECT_NE(message_of([] { std::raise(SIGSEGV); }).find("crashed"), std::string::npos);
}

}  // namespace
}  // namespace voxfit::io
