#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/test_support.h"
#include "voxfit/core/error.h"
#include "voxfit/train/event_writer.h"

namespace voxfit::train {
namespace {

class Events : public test::TempDirTest {};

TEST(Crc32c, KnownVector) { EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u); }

TEST_F(Events, ScalarsRoundTripWithValidCrcs) {
  std::filesystem::path file;
  {
    EventWriter w(dir() / "tb");
    w.add_scalar("train/loss", 0.75, 1);
    w.add_scalar("train/lr", 1e-4, 1);
    w.add_scalar("train/loss", 0.5, 2);
    w.flush();
    file = w.path();
  }
  EXPECT_EQ(file.filename().string().rfind("events.out.tfevents.", 0), 0u);
  const auto events = read_scalar_events(file);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].tag, "train/loss");
  EXPECT_FLOAT_EQ(events[0].value, 0.75f);
  EXPECT_EQ(events[2].step, 2);
  EXPECT_FLOAT_EQ(events[1].value, 1e-4f);
}

TEST_F(Events, CorruptionIsDetected) {
  std::filesystem::path file;
  {
    EventWriter w(dir());
    w.add_scalar("x", 1.0, 1);
    file = w.path();
  }
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-6, std::ios::end);
    f.put('\x7f');
  }
  EXPECT_THROW(read_scalar_events(file), IoError);
}

}  // namespace
}  // namespace voxfit::train
