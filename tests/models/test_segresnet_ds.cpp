// SegResNetDS (models/nets/segresnet_ds.h): the outputs of MONAI 1.5's SegResNetDS with the same
// weights (tests/models/reference/make_segresnet_ds.py wrote them), its settings and its memory rule.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model_test_support.h"
#include "reference_outputs.h"
#include "support/test_support.h"
#include "voxfit/core/error.h"
#include "voxfit/models/nets/segresnet_ds.h"

namespace voxfit::models {
namespace {

// The per-network suites (model_test_support.h) on a small SegResNetDS (two heads).
const test::SmallNetRegistrar kSmallSegResNetDS(test::SmallNet{
    "segresnet_ds", {{"init_filters", "4"}, {"blocks_down", "1,2,1"}}, {16, 32, 32}, 1, 3});

class SegResNetDSReference : public ::testing::TestWithParam<std::string> {};

TEST_P(SegResNetDSReference, OutputsEqualMonaisNetworkWithTheSameWeights) {
  const test::ReferenceOutputs ref("segresnet_ds_" + GetParam());
  const auto& c = ref.manifest.at("config");
  const int64_t dsdepth = c.at("dsdepth").get<int64_t>();
  SegResNetDS net(SegResNetDSOptions()
                      .num_classes(c.at("classes").get<int64_t>())
                      .init_filters(c.at("init_filters").get<int64_t>())
                      .blocks_down(test::ints(c.at("blocks_down")))
                      .norm_name(c.at("norm").get<std::string>())
                      .deep_supervision(dsdepth > 1)
                      .dsdepth(dsdepth));
  EXPECT_EQ(count_parameters(*net), ref.manifest.at("parameters").get<int64_t>());
  test::fill_by_formula(*net);
  const auto x = test::input_formula({2, 1, 16, 32, 32});
  torch::NoGradGuard no_grad;
  net->train();  // batch norm's running statistics move here, as in the script
  ref.expect_equal(net->forward(x), "train_", static_cast<size_t>(dsdepth));
  net->eval();
  ref.expect_equal(net->forward(x), "eval_", 1);
}

INSTANTIATE_TEST_SUITE_P(Configurations, SegResNetDSReference, ::testing::Values("instance_ds", "batch"));

TEST(SegResNetDS, RefusesWhatMonaiCannotBuildAndInputsOffItsDivisor) {
  EXPECT_THROW(SegResNetDS(SegResNetDSOptions().norm_name("instance")), ConfigError);  // MONAI's is affine
  EXPECT_THROW(SegResNetDS(SegResNetDSOptions().blocks_down({1})), ConfigError);
  // A dsdepth beyond the decoder's two levels heads both, as MONAI's.
  SegResNetDS net(SegResNetDSOptions().init_filters(4).blocks_down({1, 1, 1}).num_classes(2));
  net->train();
  EXPECT_EQ(net->output_shapes({1, 1, 16, 16, 16}).size(), 2u);
  EXPECT_EQ(net->forward(torch::zeros({1, 1, 16, 16, 16})).size(), 2u);
  EXPECT_THROW(net->forward(torch::zeros({1, 1, 16, 16, 18})), ModelError);
  EXPECT_THROW(net->forward(torch::zeros({1, 2, 16, 16, 16})), ModelError);
}

// The network's own activation rule against real CPU steps, instance and batch norm, with and
// without recomputed levels: every block within 1% (measured: exact).
TEST(SegResNetDS, PredictedMemoryMatchesARealStepOnTheCpu) {
  for (const char* extra : {"", " --recompute blocks", " --norm-name batch --deep-supervision false"}) {
    const auto r = test::run_voxfit(
        std::string("models --model segresnet_ds --patch 32 --classes 3 --init-filters 4 --blocks-down 1,2,2,1 "
                    "--dsdepth 3 --memory --batch 2 --measure --device cpu --threads 1 --optimizer sgd") +
        extra);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const char* block :
         {"stem", "encoder0", "encoder1", "encoder2", "encoder3", "decoder0", "decoder1", "decoder2"})
      EXPECT_LE(std::abs(test::row_error_percent(r.out, block)), 1.0) << extra << " " << block << "\n" << r.out;
    EXPECT_LE(std::abs(test::row_error_percent(r.out, "activations (all blocks)")), 1.0) << extra << r.out;
  }
}

}  // namespace
}  // namespace voxfit::models
