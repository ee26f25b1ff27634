// MedNeXt (models/nets/mednext.h): the outputs of MONAI 1.5's MedNeXt with the same weights
// (tests/models/reference/make_mednext.py wrote them), and the variants' settings.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model_test_support.h"
#include "reference_outputs.h"
#include "support/test_support.h"
#include "voxfit/core/error.h"
#include "voxfit/models/nets/mednext.h"

namespace voxfit::models {
namespace {

// The per-network suites (model_test_support.h) on a small MedNeXt-S with deep supervision.
const test::SmallNetRegistrar kSmallMedNeXt(test::SmallNet{
    "mednext_s", {{"init_filters", "4"}, {"deep_supervision", "true"}}, {16, 32, 32}, 1, 3});

class MedNeXtReference : public ::testing::TestWithParam<std::string> {};

TEST_P(MedNeXtReference, OutputsEqualMonaisNetworkWithTheSameWeights) {
  const test::ReferenceOutputs ref("mednext_" + GetParam());
  const auto& c = ref.manifest.at("config");
  MedNeXt net(MedNeXtOptions()
                  .num_classes(c.at("classes").get<int64_t>())
                  .init_filters(c.at("init_filters").get<int64_t>())
                  .kernel_size(c.at("kernel_size").get<int64_t>())
                  .deep_supervision(c.at("deep_supervision").get<bool>())
                  .encoder_expansion(test::ints(c.at("encoder_expansion")))
                  .decoder_expansion(test::ints(c.at("decoder_expansion")))
                  .bottleneck_expansion(c.at("bottleneck_expansion").get<int64_t>())
                  .blocks_down(test::ints(c.at("blocks_down")))
                  .blocks_bottleneck(c.at("blocks_bottleneck").get<int64_t>())
                  .blocks_up(test::ints(c.at("blocks_up"))));
  EXPECT_EQ(count_parameters(*net), ref.manifest.at("parameters").get<int64_t>());
  test::fill_by_formula(*net);
  const auto x = test::input_formula({1, 1, 16, 32, 32});
  torch::NoGradGuard no_grad;
  net->train();  // with deep supervision: the full-resolution output, then each coarser level
  ref.expect_equal(net->forward(x), "train_", c.at("deep_supervision").get<bool>() ? 5 : 1);
  net->eval();
  ref.expect_equal(net->forward(x), "eval_", 1);
}

INSTANTIATE_TEST_SUITE_P(Configurations, MedNeXtReference, ::testing::Values("k3_ds", "k5"));

TEST(MedNeXt, VariantsAreCreateMednextsAndInputsMustDivideBySixteen) {
  // create_mednext's factory defaults: deep supervision off, kernel 3, init 32.
  for (const char* v : {"mednext_s", "mednext_b", "mednext_m", "mednext_l"}) {
    const auto& e = find_model(v);
    for (const auto& p : e.params) {
      if (p.name == "deep_supervision") {
        EXPECT_EQ(p.default_value, "false") << v;
      }
    }
  }
  MedNeXt net(MedNeXtOptions().init_filters(4).num_classes(2));
  EXPECT_THROW(net->forward(torch::zeros({1, 1, 16, 16, 24})), ModelError);
  EXPECT_THROW(MedNeXt(MedNeXtOptions().blocks_down({2, 2, 2})), ConfigError);
}

// The network's own activation rule (saved_activations) against real CPU steps, with and without
// recomputed levels: every block's saved activations within 1% (measured: exact). The loss's
// share lands partly in "out" when measured (the sum of "out" and "other activations" matches).
// The peak within 10% without recomputation (measured: +8%; on the H200 at 128^3, +5%:
// experiments/networks), and not below the measured one with it (+42%).
TEST(MedNeXt, PredictedMemoryMatchesARealStepOnTheCpu) {
  for (const char* recompute : {"none", "blocks"}) {
    const auto r = test::run_voxfit(
        std::string("models --model mednext_s --patch 32 --classes 3 --init-filters 8 --memory --batch 2 --measure "
                    "--device cpu --threads 1 --optimizer sgd --recompute ") +
        recompute);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const char* block : {"stem", "encoder0", "encoder1", "encoder2", "encoder3", "bottleneck", "decoder0",
                              "decoder1", "decoder2", "decoder3"})
      EXPECT_LE(std::abs(test::row_error_percent(r.out, block)), 1.0) << recompute << " " << block << "\n" << r.out;
    EXPECT_LE(std::abs(test::row_error_percent(r.out, "activations (all blocks)")), 3.0) << recompute << r.out;
    const double peak = test::row_error_percent(r.out, "peak");
    if (std::string(recompute) == "none")
      EXPECT_LE(std::abs(peak), 10.0) << r.out;
    else  // recomputed levels: the recomputation's transients are allowed for generously
      EXPECT_GE(peak, 0.0) << r.out;
  }
}

}  // namespace
}  // namespace voxfit::models
