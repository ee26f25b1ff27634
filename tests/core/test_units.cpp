#include <gtest/gtest.h>

#include "voxfit/core/error.h"
#include "voxfit/core/units.h"

namespace voxfit {

TEST(Units, ParsesBinaryAndDecimalSuffixes) {
  EXPECT_EQ(parse_bytes("24GiB"), 24ull * kGiB);
  EXPECT_EQ(parse_bytes("24 GiB"), 24ull * kGiB);
  EXPECT_EQ(parse_bytes("24G"), 24ull * kGiB);
  EXPECT_EQ(parse_bytes("48GB"), 48'000'000'000ull);
  EXPECT_EQ(parse_bytes("512MiB"), 512ull * kMiB);
  EXPECT_EQ(parse_bytes("1.5gib"), 3ull * kGiB / 2);
  EXPECT_EQ(parse_bytes("4096"), 4096ull);
}

TEST(Units, RejectsNonsenseWithTheFieldName) {
  for (const char* bad : {"", "GiB", "-3GiB", "0", "12 parsecs", "nan", "1e30TB"}) {
    try {
      parse_bytes(bad, "--vram");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--vram"), std::string::npos) << e.what();
    }
  }
}

TEST(Units, FormatsForPeople) {
  EXPECT_EQ(format_bytes(17), "17 B");
  EXPECT_EQ(format_bytes(512ull * kMiB), "512.00 MiB");
  EXPECT_EQ(format_bytes(24ull * kGiB), "24.00 GiB");
}

}  // namespace voxfit
