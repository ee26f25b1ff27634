// Output shapes (with deep supervision) at small settings, output_shapes() against a real forward,
// and the shape errors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model_test_support.h"
#include "voxfit/core/error.h"
#include "voxfit/models/network.h"

namespace voxfit::models {
namespace {

using Shapes = std::vector<std::vector<int64_t>>;

struct ShapeCase {
  std::string label;
  test::SmallNet net;
  int64_t batch;
  Shapes training;
  Shapes eval;
};

void PrintTo(const ShapeCase& c, std::ostream* os) { *os << c.label; }

class NetworkShapes : public ::testing::TestWithParam<ShapeCase> {};

Shapes shapes_of(const std::vector<torch::Tensor>& ts) {
  Shapes s;
  for (const auto& t : ts) s.push_back(t.sizes().vec());
  return s;
}

TEST_P(NetworkShapes, ForwardAndOutputShapesAgree) {
  const ShapeCase& c = GetParam();
  torch::manual_seed(0);
  const Network net = make_model(c.net.model, test::context_of(c.net));
  const auto input = torch::randn(test::input_shape(c.net, c.batch));
  torch::NoGradGuard no_grad;
  net->train(true);
  EXPECT_EQ(shapes_of(net->forward(input)), c.training);
  EXPECT_EQ(net->output_shapes(input.sizes().vec()), c.training);
  net->eval();
  const auto out = net->forward(input);
  EXPECT_EQ(shapes_of(out), c.eval);
  EXPECT_EQ(net->output_shapes(input.sizes().vec()), c.eval);
  EXPECT_TRUE(torch::isfinite(out[0]).all().item<bool>());
}

INSTANTIATE_TEST_SUITE_P(
    Small, NetworkShapes,
    ::testing::Values(
        ShapeCase{"unet3d_deep_supervision",
                  test::small_net("unet3d"),
                  2,
                  {{2, 3, 16, 32, 16}, {2, 3, 8, 16, 8}, {2, 3, 4, 8, 4}},
                  {{2, 3, 16, 32, 16}}},
        ShapeCase{
            "unet3d_without_deep_supervision",
            {"unet3d", {{"stages", "3"}, {"base_features", "4"}, {"deep_supervision", "false"}}, {8, 8, 12}, 1, 2},
            1,
            {{1, 2, 8, 8, 12}},
            {{1, 2, 8, 8, 12}}},
        ShapeCase{"unetr_anisotropic", test::small_net("unetr"), 2, {{2, 3, 32, 32, 16}}, {{2, 3, 32, 32, 16}}},
        ShapeCase{"swin_unetr_12_at_64",
                  {"swin_unetr", {{"feature_size", "12"}}, {64, 64, 64}, 1, 3},
                  1,
                  {{1, 3, 64, 64, 64}},
                  {{1, 3, 64, 64, 64}}},
        ShapeCase{"swin_unetr_v2_anisotropic",
                  {"swin_unetr", {{"feature_size", "12"}, {"use_v2", "true"}}, {32, 64, 32}, 2, 2},
                  2,
                  {{2, 2, 32, 64, 32}},
                  {{2, 2, 32, 64, 32}}},
        ShapeCase{"resnet50_non_square",
                  {"resnet50", {{"blocks_per_stage", "1,1,1,1"}}, {32, 48}, 3, 5},
                  2,
                  {{2, 5}},
                  {{2, 5}}},
        ShapeCase{"vit", test::small_net("vit_base_patch16_224"), 2, {{2, 5}}, {{2, 5}}}),
    [](const auto& info) { return info.param.label; });

// The message of the ModelError `f` throws ("" if none).
template <typename F>
std::string model_error(F&& f) {
  try {
    f();
  } catch (const ModelError& e) {
    return e.what();
  }
  return "";
}

ModelContext small_swin(std::vector<int64_t> patch) {
  ModelContext ctx;
  ctx.params = {{"feature_size", "12"}};
  ctx.patch = std::move(patch);
  return ctx;
}

TEST(ShapeErrors, SwinUnetrPatchNotDivisibleBy32AtBuildTime) {
  const auto msg = model_error([] { make_model("swin_unetr", small_swin({64, 64, 48})); });
  EXPECT_NE(msg.find("W=48"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not divisible by 32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[1, 1, 64, 64, 48]"), std::string::npos) << msg;
}

TEST(ShapeErrors, SwinUnetrInputNotDivisibleBy32InForward) {
  const Network net = make_model("swin_unetr", small_swin({32, 32, 32}));
  const auto msg = model_error([&] { net->forward(torch::zeros({1, 1, 32, 40, 32})); });
  EXPECT_NE(msg.find("H=40"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[1, 1, 32, 40, 32]"), std::string::npos) << msg;
}

TEST(ShapeErrors, UnetrPatchNotDivisibleBy16) {
  ModelContext ctx;
  ctx.patch = {96, 96, 88};
  const auto msg = model_error([&] { make_model("unetr", ctx); });
  EXPECT_NE(msg.find("[96, 96, 88]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("16"), std::string::npos) << msg;
}

TEST(ShapeErrors, UnetrInputOtherThanItsPositionEmbeddingGrid) {
  const test::SmallNet small = test::small_net("unetr");
  const Network net = make_model("unetr", test::context_of(small));
  const auto msg = model_error([&] { net->forward(torch::zeros({1, 1, 32, 32, 32})); });
  EXPECT_NE(msg.find("expected [32, 32, 16]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("position embedding"), std::string::npos) << msg;
}

TEST(ShapeErrors, WrongChannelCount) {
  for (const auto& small : test::small_nets()) {
    const Network net = make_model(small.model, test::context_of(small));
    auto shape = test::input_shape(small, 1);
    shape[1] = small.in_channels + 1;
    const auto msg = model_error([&] { net->forward(torch::zeros(shape)); });
    EXPECT_NE(msg.find(std::to_string(shape[1]) + " channels, the network was built for " +
                       std::to_string(small.in_channels)),
              std::string::npos)
        << small.model << ": " << msg;
  }
}

TEST(ShapeErrors, WrongRankAndWrongPatchDimensions) {
  const test::SmallNet small = test::small_net("unet3d");
  const Network net = make_model(small.model, test::context_of(small));
  const auto msg = model_error([&] { net->forward(torch::zeros({1, 2, 16, 32})); });
  EXPECT_NE(msg.find("[B, C, D, H, W]"), std::string::npos) << msg;

  ModelContext two_d;
  two_d.patch = {96, 96};
  EXPECT_NE(model_error([&] { make_model("unet3d", two_d); }).find("needs 3 sizes"), std::string::npos);
  EXPECT_NO_THROW(net->check_input({1, 2, 16, 32, 16}));
  EXPECT_NE(model_error([&] { net->check_input({1, 2, 12, 32, 16}); }).find("D=12"), std::string::npos);
}

TEST(ShapeErrors, Unet3dPatchNotDivisibleByItsDownsampling) {
  ModelContext ctx;
  ctx.patch = {96, 96, 40};
  const auto msg = model_error([&] { make_model("unet3d", ctx); });
  EXPECT_NE(msg.find("W=40"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not divisible by 32"), std::string::npos) << msg;
}

}  // namespace
}  // namespace voxfit::models
