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

// The one number parser: whole text or nothing.
TEST(Units, ParsesWholeNumbersOnly) {
  EXPECT_EQ(to_integer("96"), 96);
  EXPECT_EQ(to_integer("-3"), -3);
  for (const char* bad : {"", "9x", " 9", "1e3", "99999999999999999999"})
    EXPECT_FALSE(to_integer(bad).has_value()) << bad;
  EXPECT_DOUBLE_EQ(to_number("1e-4").value(), 1e-4);
  EXPECT_DOUBLE_EQ(to_number("0.33").value(), 0.33);
  for (const char* bad : {"", "0.3mm", " 1", "x"}) EXPECT_FALSE(to_number(bad).has_value()) << bad;
  EXPECT_EQ(format_duration(45.2), "45s");
  EXPECT_EQ(format_duration(192), "3m12s");
  EXPECT_EQ(format_duration(7500), "2h05m");
  EXPECT_EQ(format_duration(-1), "?");
}

TEST(Units, FormatsForPeople) {
  EXPECT_EQ(format_bytes(17), "17 B");
  EXPECT_EQ(format_bytes(512ull * kMiB), "512.00 MiB");
  EXPECT_EQ(format_bytes(24ull * kGiB), "24.00 GiB");
}

}  // namespace voxfit
