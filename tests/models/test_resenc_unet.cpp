// nnU-Net's ResidualEncoderUNet (models/nets/resenc_unet.h): the topology nnU-Net's planner gives a
// patch, the parameter counts, and the outputs of dynamic_network_architectures' network with the
// same weights (tests/models/reference/make_resenc_unet.py wrote them).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model_test_support.h"
#include "reference_outputs.h"
#include "support/test_support.h"
#include "voxfit/models/nets/resenc_unet.h"

namespace voxfit::models {
namespace {

// The per-network suites (model_test_support.h) on a small ResEnc; anisotropic: it pools the short
// axis one stage less (nnU-Net's rules).
const test::SmallNetRegistrar kSmallResEnc(test::SmallNet{
    "resenc_unet", {{"base_features", "4"}, {"max_features", "16"}}, {16, 32, 32}, 1, 3, true});

class ResEncReference : public ::testing::TestWithParam<std::string> {};

TEST_P(ResEncReference, OutputsEqualNnUNetsNetworkWithTheSameWeights) {
  const test::ReferenceOutputs ref("resenc_unet_" + GetParam());
  const auto& m = ref.manifest;
  const auto& c = m.at("config");
  const auto patch = test::ints(c.at("patch"));
  ResEncUNet net(ResEncUNetOptions()
                     .num_classes(c.at("classes").get<int64_t>())
                     .img_size(patch)
                     .spacing(c.at("spacing").get<std::vector<double>>())
                     .base_features(c.at("base").get<int64_t>())
                     .max_features(c.at("maxf").get<int64_t>()));
  // The topology nnU-Net's get_pool_and_conv_props gave the reference.
  const auto& t = net->topology();
  ASSERT_EQ(t.stages(), m.at("strides").size());
  for (size_t s = 0; s < t.stages(); ++s) {
    EXPECT_EQ(std::vector<int64_t>(t.strides[s].begin(), t.strides[s].end()), test::ints(m.at("strides")[s])) << s;
    EXPECT_EQ(std::vector<int64_t>(t.kernels[s].begin(), t.kernels[s].end()), test::ints(m.at("kernels")[s])) << s;
  }
  EXPECT_EQ(count_parameters(*net), m.at("parameters").get<int64_t>());
  test::fill_by_formula(*net);
  std::vector<int64_t> shape = {1, 1};
  shape.insert(shape.end(), patch.begin(), patch.end());
  const auto x = test::input_formula(shape);
  torch::NoGradGuard no_grad;
  net->train();  // deep supervision: every decoder stage, highest resolution first
  ref.expect_equal(net->forward(x), "train_", t.stages() - 1);
  net->eval();
  ref.expect_equal(net->forward(x), "eval_", 1);
}

INSTANTIATE_TEST_SUITE_P(Configurations, ResEncReference, ::testing::Values("cube", "aniso"));

// nnU-Net's planner topologies (network_topology.py), from worked cases of its ResEnc plans.
TEST(ResEncTopology, FollowsNnUNetsPoolingRules) {
  const auto strides = [](const ResEncTopology& t) {
    std::vector<std::vector<int64_t>> out;
    for (const auto& s : t.strides) out.push_back({s[0], s[1], s[2]});
    return out;
  };
  using V = std::vector<std::vector<int64_t>>;
  EXPECT_EQ(resenc_topology({96, 96, 96}, {1, 1, 1}).stages(), 5u);
  EXPECT_EQ(resenc_topology({128, 128, 128}, {1, 1, 1}).stages(), 6u);
  EXPECT_EQ(resenc_topology({224, 224, 224}, {1, 1, 1}).stages(), 6u);  // 224 / 2^5 = 7 < 8
  EXPECT_EQ(resenc_topology({256, 256, 256}, {1, 1, 1}).stages(), 7u);
  // ResEnc L's plan for spacing 3 x 0.8 x 0.8 mm: 56 x 320 x 256, 7 stages (values from nnunetv2 2.8.1's
  // get_pool_and_conv_props, as the next case's).
  const auto t = resenc_topology({56, 320, 256}, {3.0, 0.8, 0.8});
  EXPECT_EQ(strides(t), (V{{1, 1, 1}, {1, 2, 2}, {2, 2, 2}, {2, 2, 2}, {2, 2, 2}, {1, 2, 2}, {1, 2, 2}}));
  EXPECT_EQ(t.kernels.front(), (Axes3{1, 3, 3}));
  EXPECT_EQ(t.kernels[1], (Axes3{3, 3, 3}));
  EXPECT_EQ(t.divisor, (Axes3{8, 64, 64}));
  // A patch off the divisor is padded up as nnU-Net pads it.
  EXPECT_EQ(resenc_topology({90, 96, 100}, {1, 1, 1}).patch, (Axes3{96, 96, 112}));
  EXPECT_EQ(resenc_topology({90, 96, 100}, {1, 1, 1}).divisor, (Axes3{16, 16, 16}));
}

TEST(ResEncUNet, RefusesAnInputOffItsDivisorAndAPatchTooSmallToPool) {
  ResEncUNet net(ResEncUNetOptions().img_size({16, 16, 16}).base_features(4).max_features(8));
  try {
    net->forward(torch::zeros({1, 1, 16, 16, 10}));
    FAIL() << "an input off the divisor was accepted";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("not divisible by 4x4x4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ResEncUNet(ResEncUNetOptions().img_size({4, 4, 4})), ModelError);
}

TEST(ResEncUNet, InitialisesAsNnUNet) {
  torch::manual_seed(0);
  ResEncUNet net(ResEncUNetOptions().img_size({32, 32, 32}).base_features(8).max_features(64));
  int zeroed = 0, ones = 0;
  for (const auto& p : net->named_parameters()) {
    const std::string& n = p.key();
    const auto& v = p.value();
    if (n.find("conv2.norm.") != std::string::npos) {
      EXPECT_EQ(v.abs().max().item<float>(), 0.0f) << n;  // the norm before each residual add
      zeroed += n.find("weight") != std::string::npos;
    } else if (n.size() > 11 && n.compare(n.size() - 11, 11, "norm.weight") == 0) {
      EXPECT_EQ(v.min().item<float>(), 1.0f) << n;
      ++ones;
    } else if (n.size() > 4 && n.compare(n.size() - 4, 4, "bias") == 0) {
      EXPECT_EQ(v.abs().max().item<float>(), 0.0f) << n;
    }
  }
  EXPECT_EQ(zeroed, 1 + 3 + 4 + 6);  // one per residual block
  EXPECT_EQ(ones, 1 + 14 + 3 + 3);   // stem, each conv1, the three projections, the three decoder stages
  // He(a = 0.01) on fan-in: a 3x3x3 conv of 8 -> 16 channels, std sqrt(2 / 1.0001) / sqrt(8 * 27).
  const auto w = net->named_parameters()["encoder.stages.1.blocks.0.conv1.conv.weight"];
  EXPECT_NEAR(w.std().item<double>(), std::sqrt(2.0 / 1.0001) / std::sqrt(8.0 * 27.0), 0.01);
}

// The network's own activation rule (saved_activations) against a real CPU step: every block's
// saved activations within 1% (measured: exact), the peak within 10% at one thread (measured: +1.7%).
TEST(ResEncUNet, PredictedMemoryMatchesARealStepOnTheCpu) {
  const auto r = test::run_voxfit(
      "models --model resenc_unet --patch 32 --classes 3 --base-features 8 --max-features 32 --memory --batch 2 "
      "--measure --device cpu --threads 1 --optimizer sgd");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* block : {"stem", "encoder0", "encoder1", "encoder2", "encoder3", "decoder0", "decoder1", "decoder2"})
    EXPECT_LE(std::abs(test::row_error_percent(r.out, block)), 1.0) << block << "\n" << r.out;
  EXPECT_LE(std::abs(test::row_error_percent(r.out, "activations (all blocks)")), 1.0) << r.out;
  EXPECT_LE(std::abs(test::row_error_percent(r.out, "peak")), 10.0) << r.out;
}

}  // namespace
}  // namespace voxfit::models
