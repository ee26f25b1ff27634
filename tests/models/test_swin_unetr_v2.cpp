// SwinUNETR-v2 (models/nets/swin_unetr_v2.cpp, swin_unetr with use_v2): what its residual conv
// blocks add to the activation rule, against real CPU steps.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>

#include "support/test_support.h"

namespace voxfit::models {
namespace {

double mib(double value, const std::string& unit) {
  return unit == "GiB" ? value * 1024 : unit == "MiB" ? value : unit == "KiB" ? value / 1024 : value / 1048576;
}

// The predicted and measured MiB of the row `component` of `voxfit models --memory --measure`.
std::pair<double, double> row_mib(const std::string& out, const std::string& component) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  " + component + " ", 0) != 0) continue;
    std::istringstream row(line.substr(component.size() + 2));
    double predicted = 0, measured = 0;
    std::string pu, mu;
    row >> predicted >> pu >> measured >> mu;
    return {mib(predicted, pu), mib(measured, mu)};
  }
  ADD_FAILURE() << "no row '" << component << "' in\n" << out;
  return {0, 0};
}

// v2's blocks (a UnetResBlock before each Swin stage) are what the rule adds to SwinUNETR's: the
// difference v2 makes to the predicted swin_vit block equals the difference it makes to the measured
// one within 1%, plainly and with recomputed blocks (the rest of the block is SwinUNETR's rule,
// checked on the GPU).
TEST(SwinUNETRv2, ItsConvBlocksAddWhatARealStepKeeps) {
  for (const char* recompute : {"none", "blocks"}) {
    const auto run = [&](const char* model) {
      const auto r = test::run_voxfit(std::string("models --model ") + model +
                                      " --patch 64 --feature-size 12 --classes 3 --memory --batch 1 --measure "
                                      "--device cpu --threads 1 --optimizer sgd --recompute " +
                                      recompute);
      EXPECT_EQ(r.exit_code, 0) << r.err;
      return row_mib(r.out, "swin_vit");
    };
    const auto [p1, m1] = run("swin_unetr");
    const auto [p2, m2] = run("swin_unetr_v2");
    ASSERT_GT(m2 - m1, 1.0) << recompute;
    EXPECT_NEAR(p2 - p1, m2 - m1, 0.01 * (m2 - m1)) << recompute;
  }
}

}  // namespace
}  // namespace voxfit::models
