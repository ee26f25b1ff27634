// voxfit plan (sweep/plan.h): nnU-Net's ResEnc planners ported exactly (against nnunetv2 2.8.1's own
// plans, tests/sweep/reference/make_nnunet_plans.py), and the measured plan on the real CT under two
// CPU budgets, its outputs and the nnU-Net plans file built in Python.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/test_support.h"
#include "voxfit/data/plan.h"
#include "voxfit/models/network.h"
#include "voxfit/sweep/plan.h"

namespace voxfit::sweep {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::int64_t> vec3(const models::Axes3& a) { return {a[0], a[1], a[2]}; }
std::int64_t voxels(const std::vector<std::int64_t>& p) { return p[0] * p[1] * p[2]; }

// Every fingerprint of the fixture (isotropic and anisotropic spacings, images that bind the patch,
// datasets that bind the batch) under M, L and XL: the same patch, batch, network and estimate.
TEST(NnUNetPlanner, ResEncPresetsPlanAsNnunetv2Does) {
  std::ifstream in(test::source_dir() / "tests" / "sweep" / "reference" / "nnunet_resenc_plans.json");
  const json ref = json::parse(in);
  ASSERT_GE(ref.at("plans").size(), 18u);
  for (const auto& c : ref.at("plans")) {
    Fingerprint f;
    f.spacing = c.at("spacing").get<std::array<double, 3>>();
    f.median_shape = c.at("median_shape").get<std::array<double, 3>>();
    f.cases = c.at("cases").get<std::int64_t>();
    f.channels = ref.at("channels").get<std::int64_t>();
    f.classes = ref.at("classes").get<std::int64_t>();
    const std::string preset = c.at("preset").get<std::string>();
    const auto& presets = nnunet_presets();
    const auto it =
        std::find_if(presets.begin(), presets.end(), [&](const NnUNetPreset& p) { return p.name == preset; });
    ASSERT_NE(it, presets.end()) << preset;
    const NnUNetPlan p = nnunet_resenc_plan(f, *it, models::ResEncUNetOptions());
    const std::string what = preset + " " + c.at("median_shape").dump() + " at " + c.at("spacing").dump();
    EXPECT_EQ(p.patch, c.at("patch").get<std::vector<std::int64_t>>()) << what;
    EXPECT_EQ(p.batch, c.at("batch").get<std::int64_t>()) << what;
    EXPECT_EQ(p.estimate, c.at("estimate").get<std::int64_t>()) << what;
    std::vector<std::vector<std::int64_t>> strides, kernels;
    for (size_t s = 0; s < p.topology.stages(); ++s) {
      strides.push_back(vec3(p.topology.strides[s]));
      kernels.push_back(vec3(p.topology.kernels[s]));
    }
    EXPECT_EQ(strides, c.at("strides").get<std::vector<std::vector<std::int64_t>>>()) << what;
    EXPECT_EQ(kernels, c.at("kernels").get<std::vector<std::vector<std::int64_t>>>()) << what;
  }
  // The presets a card's size plans with.
  EXPECT_FALSE(nnunet_preset_for(std::uint64_t{4} << 30).has_value());
  EXPECT_EQ(nnunet_preset_for(24ull * 1000 * 1000 * 1000)->name, "L");  // rtx3090: 24 GB
  EXPECT_EQ(nnunet_preset_for(std::uint64_t{48} << 30)->name, "XL");    // a40
}

// The order nnU-Net shrinks in: strictly fewer voxels each step, each patch on its network's divisor.
TEST(NnUNetPlanner, ShrinkOrderShrinksOneAxisByItsDivisor) {
  Fingerprint f;
  f.spacing = {2.5, 0.8, 0.8};
  f.median_shape = {120, 512, 512};
  f.cases = 30;
  std::vector<std::int64_t> patch = nnunet_initial_patch(f, {});
  int steps = 0;
  while (const auto next = nnunet_shrink_step(patch, f, {})) {
    EXPECT_LT(voxels(*next), voxels(patch));
    const auto t = resenc_topology_for(*next, f, {});
    for (int i = 0; i < 3; ++i) EXPECT_EQ((*next)[static_cast<size_t>(i)] % t.divisor[static_cast<size_t>(i)], 0);
    patch = *next;
    ASSERT_LT(++steps, 1000);
  }
  EXPECT_GT(steps, 20);
  EXPECT_LE(voxels(patch), 16 * 16 * 16);
}

// Two CPU budgets on the real CT, small widths: each budget's patch is the first of nnU-Net's order
// that trains at batch 2 (the one before it was probed and ran out of memory), the larger budget's
// patch is no smaller, the batch is the exact boundary, and the outputs agree with each other.
class PlanCommand : public test::TempDirTest {
 protected:
  // `voxfit plan` on the real CT under 200 and 400 MiB of CPU memory, small widths, into dir()/plan.
  PlanResult plan_small() {
    const auto r = test::run_voxfit("plan --dataset '" + test::prepared_ct_cache().string() +
                                    "' --budgets 200MiB,400MiB --device cpu --precision fp32 --base-features 8 "
                                    "--max-features 64 --warmup-steps 1 --timed-steps 1 --output '" +
                                    out().string() + "'");
    EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
    std::ifstream in(out() / "plan.json");
    const json j = json::parse(in);
    PlanResult plan = PlanResult::from_json(j);
    EXPECT_EQ(plan.to_json(), j);  // the type holds everything the file does
    return plan;
  }
  fs::path out() const { return dir() / "plan"; }
  json plans_file() const {
    std::ifstream in(out() / "nnUNetPlans_voxfit.json");
    return json::parse(in);
  }
};

TEST_F(PlanCommand, PlansEachBudgetOnTheBoundaryOfNnUNetsOrder) {
  const PlanResult plan = plan_small();
  ASSERT_EQ(plan.budgets.size(), 2u);
  std::vector<std::vector<std::int64_t>> order{nnunet_initial_patch(plan.fingerprint, plan.network)};
  while (const auto next = nnunet_shrink_step(order.back(), plan.fingerprint, plan.network)) order.push_back(*next);
  for (const auto& b : plan.budgets) {
    ASSERT_TRUE(b.error.empty()) << b.budget << ": " << b.error;
    EXPECT_GE(b.batch, 2) << b.budget;
    EXPECT_EQ(b.first_failing, b.batch + 1) << b.budget;
    EXPECT_LE(b.peak_reserved, b.usable_bytes) << b.budget;
    const auto at = std::find(order.begin(), order.end(), b.patch);
    ASSERT_NE(at, order.end()) << b.budget << ": not a patch of nnU-Net's order";
    ASSERT_NE(at, order.begin()) << b.budget << ": the budget is meant to shrink the patch";
    const auto larger = *(at - 1);
    const auto probed = std::find_if(b.candidates.begin(), b.candidates.end(),
                                     [&](const PlanCandidate& c) { return c.patch == larger; });
    ASSERT_NE(probed, b.candidates.end()) << b.budget;
    EXPECT_FALSE(probed->fits) << b.budget;
  }
  EXPECT_GE(voxels(plan.budgets[1].patch), voxels(plan.budgets[0].patch));
  EXPECT_GT(voxels(plan.budgets[1].patch), voxels(plan.budgets[0].patch));  // these two budgets differ

  const json plans = plans_file();
  ASSERT_EQ(plans.at("configurations").size(), 2u);
  for (const auto& b : plan.budgets) {
    std::string name = "3d_fullres_" + b.budget;
    for (auto& ch : name)
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_') ch = '_';
    const auto& c = plans.at("configurations").at(name);
    EXPECT_EQ(c.at("patch_size").get<std::vector<std::int64_t>>(), b.patch);
    EXPECT_EQ(c.at("batch_size").get<std::int64_t>(), b.batch);
  }
  std::ifstream md(out() / "plan.md");
  const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("| 200.00 MiB |"), std::string::npos) << text;
  EXPECT_NE(text.find("ResEnc L"), std::string::npos) << text;
  EXPECT_TRUE(fs::exists(out() / "plan.svg"));
}

// nnU-Net's side, where Python has it: nnunetv2's PlansManager loads the plans file (where nnunetv2 is
// importable) and get_network_from_plans (or dynamic_network_architectures alone) builds each
// configuration with voxfit's parameter count.
TEST_F(PlanCommand, NnUNetBuildsEachPlannedNetworkWithVoxfitsParameterCount) {
  const auto python = test::python_with("torch, dynamic_network_architectures.architectures.unet");
  if (!python) GTEST_SKIP() << "python3 with torch and dynamic_network_architectures (and numpy) is not available";
  const PlanResult plan = plan_small();
  const json plans = plans_file();
  const auto check =
      test::run_command(*python + " '" + (test::source_dir() / "tests" / "python" / "check_nnunet_plans.py").string() +
                        "' '" + (out() / "nnUNetPlans_voxfit.json").string() + "' " +
                        std::to_string(plan.fingerprint.channels) + " " + std::to_string(plan.fingerprint.classes));
  ASSERT_EQ(check.exit_code, 0) << check.err << check.out;
  std::istringstream lines(check.out);
  int checked = 0;
  for (std::string name, patch; lines >> name >> patch;) {
    std::int64_t batch = 0, params = 0;
    lines >> batch >> params;
    const auto& b = *std::find_if(plan.budgets.begin(), plan.budgets.end(), [&](const BudgetPlan& p) {
      return plans.at("configurations").at(name).at("patch_size").get<std::vector<std::int64_t>>() == p.patch;
    });
    models::ModelContext ctx = models::find_model("resenc_unet").defaults;
    ctx.patch = b.patch;
    ctx.in_channels = static_cast<int>(plan.fingerprint.channels);
    ctx.num_classes = static_cast<int>(plan.fingerprint.classes);
    std::ostringstream spacing;
    spacing << plan.fingerprint.spacing[0] << "," << plan.fingerprint.spacing[1] << "," << plan.fingerprint.spacing[2];
    ctx.params = {{"base_features", "8"}, {"max_features", "64"}, {"spacing", spacing.str()}};
    EXPECT_EQ(params, models::count_parameters(*models::make_model("resenc_unet", ctx))) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 2) << check.out;
}

// nnU-Net's widths (62M parameters, 250 MB, at the start patch) under a CPU budget of 200 MiB,
// smaller than the networks
// voxfit builds to predict the candidates' peaks: the predictions are made outside the budget,
// which caps only the probes.
TEST_F(PlanCommand, DefaultWidthsPlanUnderACpuBudgetSmallerThanTheirNetworks) {
  const auto r = test::run_voxfit("plan --dataset '" + test::prepared_ct_cache().string() +
                                  "' --budgets 200MiB --device cpu --precision fp32 --warmup-steps 1 --timed-steps 1 "
                                  "--output '" +
                                  out().string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  std::ifstream in(out() / "plan.json");
  const PlanResult plan = PlanResult::from_json(json::parse(in));
  ASSERT_EQ(plan.budgets.size(), 1u);
  const auto& b = plan.budgets[0];
  ASSERT_TRUE(b.error.empty()) << b.error;
  EXPECT_EQ(plan.network.base_features(), 32);
  EXPECT_GE(b.batch, 2);
  for (const auto& c : b.candidates) EXPECT_GT(c.predicted_peak, 0);
}

TEST_F(PlanCommand, RefusesANetworkWithoutNnUNetsRulesAndAPlanWithoutBudget) {
  const std::string dataset =
      "--dataset '" + test::prepared_ct_cache().string() + "' --device cpu --output '" + (dir() / "p").string() + "'";
  auto r = test::run_voxfit("plan " + dataset + " --model unetr --budgets 1GiB");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("resenc_unet"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  r = test::run_voxfit("plan " + dataset);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("budget"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir() / "p" / "plan.json"));
}

}  // namespace
}  // namespace voxfit::sweep
