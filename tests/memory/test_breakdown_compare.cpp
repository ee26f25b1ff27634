// A predicted breakdown beside a measured one: parts matched by name, the errors relative to the
// measured bytes.
#include <gtest/gtest.h>

#include <cmath>

#include "voxfit/memory/breakdown_compare.h"

namespace voxfit::memory {
namespace {

TEST(BreakdownCompare, MatchesPartsByNameAndAddsBlocksAndPeak) {
  MemoryBreakdown predicted, measured;
  predicted.parts = {{"parameters", "static", 100},
                     {"encoder0", "activations", 300},
                     {"other activations", "activations", 50},
                     {"workspace", "workspace", 0}};
  predicted.peak_allocated = 450;
  measured.parts = {{"parameters", "static", 100},
                    {"encoder0", "activations", 200},
                    {"other activations", "activations", 40},
                    {"gradients", "gradients", 10}};
  measured.peak_allocated = 500;
  const auto rows = compare_breakdowns(predicted, measured);
  ASSERT_EQ(rows.size(), 7u);
  EXPECT_EQ(rows[0].name, "parameters");
  EXPECT_DOUBLE_EQ(rows[0].relative(), 0.0);
  EXPECT_DOUBLE_EQ(rows[1].relative(), 0.5);
  EXPECT_EQ(rows[3].measured, 0);  // workspace: the measured breakdown has none
  EXPECT_DOUBLE_EQ(rows[3].relative(), 0.0);
  EXPECT_EQ(rows[4].name, "gradients");  // measured only
  EXPECT_EQ(rows[4].predicted, 0);
  EXPECT_DOUBLE_EQ(rows[4].relative(), -1.0);
  EXPECT_EQ(rows[5].name, "activations (all blocks)");
  EXPECT_EQ(rows[5].predicted, 300);  // other activations are not a block
  EXPECT_EQ(rows[5].measured, 200);
  EXPECT_EQ(rows[6].name, "peak");
  EXPECT_DOUBLE_EQ(rows[6].relative(), -0.1);
  EXPECT_TRUE(std::isinf(ComponentError{"x", 5, 0}.relative()));
}

}  // namespace
}  // namespace voxfit::memory
