// Parameter counts of the full-size networks against MONAI 1.3 / timm, and the registry itself.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>

#include "voxfit/core/error.h"
#include "voxfit/models/blocks/layers.h"
#include "voxfit/models/nets/resnet.h"
#include "voxfit/models/nets/unet3d.h"
#include "voxfit/models/nets/vit.h"
#include "voxfit/models/network.h"

namespace voxfit::models {
namespace {

struct CountCase {
  std::string label;
  std::string model;
  std::map<std::string, std::string> params;
  int64_t expected;
  std::vector<int64_t> patch = {};  ///< empty: the entry's default
};

void PrintTo(const CountCase& c, std::ostream* os) { *os << c.label; }

// Every registered network at its reference setting and at each further configuration its entry
// states a count for (ModelEntry::reference_counts): a new network brings its own cases.
std::vector<CountCase> registry_cases() {
  std::vector<CountCase> out;
  for (const auto& e : registry()) {
    out.push_back({e.name, e.name, {}, e.reference_parameters});
    for (const auto& c : e.reference_counts) out.push_back({c.label, e.name, c.params, c.parameters, c.patch});
  }
  return out;
}

class ParameterCount : public ::testing::TestWithParam<CountCase> {};

TEST_P(ParameterCount, MatchesReferenceImplementation) {
  const CountCase& c = GetParam();
  ModelContext ctx = find_model(c.model).defaults;
  ctx.params = c.params;
  if (!c.patch.empty()) ctx.patch = c.patch;
  const Network net = make_model(c.model, ctx);
  EXPECT_EQ(count_parameters(*net), c.expected);
}

INSTANTIATE_TEST_SUITE_P(Registry, ParameterCount, ::testing::ValuesIn(registry_cases()),
                         [](const auto& info) { return info.param.label; });

// The counts the reference implementations state (MONAI 1.3 / timm), independent of the entries:
// an entry that changed its own number would still fail here.
TEST(ParameterCount, TheStatedCountsOfTheOriginalNetworks) {
  const std::map<std::string, int64_t> stated = {{"unet3d", 31205254},
                                                 {"unetr", 92784046},
                                                 {"swin_unetr", 62187296},
                                                 {"resnet50", 25557032},
                                                 {"vit_base_patch16_224", 86567656}};
  std::map<std::string, int64_t> listed;
  for (const auto& c : registry_cases()) listed[c.label] = c.expected;
  for (const auto& [label, count] : stated) EXPECT_EQ(listed[label], count) << label;
  EXPECT_EQ(listed["swin_unetr_24"], 15703304);
  EXPECT_EQ(listed["swin_unetr_12"], 4078220);
  EXPECT_EQ(listed["swin_unetr_v2_48"], 72762656);
}

TEST(Registry, ListsTheNetworksInTheirOrderWithTheirTasksAndContexts) {
  // The original five in their listing order (a new network may list anywhere among them).
  std::vector<std::string> names;
  for (const auto& e : registry())
    for (const char* n : {"unet3d", "unetr", "swin_unetr", "resnet50", "vit_base_patch16_224"})
      if (e.name == n) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"unet3d", "unetr", "swin_unetr", "resnet50", "vit_base_patch16_224"}));
  for (size_t i = 1; i < registry().size(); ++i)
    EXPECT_LE(registry()[i - 1].listing_order, registry()[i].listing_order) << registry()[i].name;
  EXPECT_EQ(find_model("unetr").task, TaskKind::kSegmentation3d);
  EXPECT_EQ(find_model("unetr").defaults.patch, (std::vector<int64_t>{96, 96, 96}));
  EXPECT_EQ(find_model("unetr").defaults.num_classes, 14);
  const auto& vit = find_model("vit_base_patch16_224");
  EXPECT_EQ(vit.task, TaskKind::kClassification2d);
  EXPECT_EQ(vit.defaults.patch, (std::vector<int64_t>{224, 224}));
  EXPECT_EQ(vit.defaults.in_channels, 3);
  EXPECT_EQ(vit.defaults.num_classes, 1000);
}

TEST(Registry, ParameterDefaultsAreTheOptionsDefaults) {
  const auto value = [](const std::string& model, const std::string& param) {
    for (const auto& p : find_model(model).params)
      if (p.name == param) return p.default_value;
    return std::string("<missing>");
  };
  EXPECT_EQ(value("unet3d", "stages"), "6");
  EXPECT_EQ(value("unet3d", "norm_name"), "instance_affine");
  EXPECT_EQ(value("unetr", "qkv_bias"), "false");
  EXPECT_EQ(value("swin_unetr", "depths"), "2,2,2,2");
  EXPECT_EQ(value("swin_unetr", "num_heads"), "3,6,12,24");
  EXPECT_EQ(value("swin_unetr", "mlp_ratio"), "4");
  EXPECT_EQ(value("vit_base_patch16_224", "qkv_bias"), "true");
  EXPECT_EQ(value("resnet50", "blocks_per_stage"), "3,4,6,3");
}

// `--channels-last auto`: each network's measured layout on CUDA (unet3d: channels-last), NCDHW on
// the CPU; on and off win over it.
TEST(Registry, ChannelsLastAutoIsPerNetworkAndOnlyOnCuda) {
  const torch::Device cuda(torch::kCUDA, 0), cpu(torch::kCPU);
  EXPECT_TRUE(resolve_channels_last(find_model("unet3d"), std::nullopt, cuda));
  EXPECT_FALSE(resolve_channels_last(find_model("unet3d"), std::nullopt, cpu));
  for (const char* name : {"unetr", "swin_unetr"})
    EXPECT_FALSE(resolve_channels_last(find_model(name), std::nullopt, cuda)) << name;
  EXPECT_TRUE(resolve_channels_last(find_model("unetr"), true, cpu));
  EXPECT_FALSE(resolve_channels_last(find_model("unet3d"), false, cuda));
}

TEST(Registry, UnknownModelNamesTheKnownOnes) {
  try {
    find_model("unet");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown model 'unet'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("swin_unetr"), std::string::npos) << e.what();
  }
}

TEST(Registry, ParameterOfAnotherModelIsRejected) {
  ModelContext ctx = find_model("unetr").defaults;
  ctx.params["depths"] = "2,2,2,2";
  try {
    make_model("unetr", ctx);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--depths is not a parameter of unetr"), std::string::npos) << e.what();
  }
}

TEST(Registry, MalformedParameterValuesNameTheOption) {
  const auto message = [](const std::string& model, const std::string& key, const std::string& value) {
    ModelContext ctx = find_model(model).defaults;
    ctx.params[key] = value;
    try {
      make_model(model, ctx);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_NE(message("unetr", "feature_size", "16x").find("--feature-size (unetr): expected an integer"),
            std::string::npos);
  EXPECT_NE(message("swin_unetr", "depths", "2,,2").find("--depths"), std::string::npos);
  EXPECT_NE(message("swin_unetr", "use_v2", "maybe").find("--use-v2 (swin_unetr): expected true or false"),
            std::string::npos);
  EXPECT_NE(message("unet3d", "norm_name", "group").find("--norm-name"), std::string::npos);
  EXPECT_NE(message("unet3d", "stages", "1").find(">= 2"), std::string::npos);
}

TEST(Initialisation, FollowsTheReferenceImplementations) {
  torch::manual_seed(0);
  // timm ViT: trunc-normal(0.02) linears with zero bias, class token ~ N(0, 1e-6).
  VisionTransformer vit(VisionTransformerOptions().hidden_size(64).mlp_dim(256).num_heads(4).num_layers(2));
  for (const auto& item : vit->named_parameters()) {
    const std::string& name = item.key();
    const torch::Tensor& p = item.value();
    if (name.find("qkv.weight") != std::string::npos || name.find("fc1.weight") != std::string::npos) {
      EXPECT_NEAR(p.std().item<double>(), 0.02, 0.002) << name;
      EXPECT_LE(p.abs().max().item<double>(), 2.0) << name;
    }
    if (name.find("qkv.bias") != std::string::npos || name == "head.bias") {
      EXPECT_EQ(p.abs().max().item<double>(), 0.0) << name;
    }
  }
  EXPECT_LT(vit->named_parameters()["cls_token"].abs().max().item<double>(), 1e-4);
  EXPECT_NEAR(vit->named_parameters()["pos_embed"].std().item<double>(), 0.02, 0.002);

  // nnU-Net: kaiming_normal_(a=0.01) on convs, zero biases, affine InstanceNorm at 1/0.
  UNet3D unet(UNet3DOptions().stages(3).base_features(16).max_features(32));
  const auto params = unet->named_parameters();
  const auto& w = params["encoder1.conv0.weight"];  // 16 -> 32, fan_in 16 * 27
  EXPECT_NEAR(w.std().item<double>(), std::sqrt(2.0 / (1 + 0.01 * 0.01) / (16 * 27)), 0.004);
  EXPECT_EQ(params["encoder1.conv0.bias"].abs().max().item<double>(), 0.0);
  EXPECT_EQ(params["encoder1.norm0.weight"].min().item<double>(), 1.0);

  // timm ResNet: last BatchNorm of each bottleneck zeroed, kaiming fan_out convs.
  ResNet resnet(ResNetOptions().blocks_per_stage({1, 1, 1, 1}));
  const auto rp = resnet->named_parameters();
  EXPECT_EQ(rp["layer1_0.bn3.weight"].abs().max().item<double>(), 0.0);
  EXPECT_EQ(rp["layer1_0.bn1.weight"].min().item<double>(), 1.0);
  EXPECT_NEAR(rp["conv1.weight"].std().item<double>(), std::sqrt(2.0 / (64 * 49)), 0.003);
}

TEST(Initialisation, TruncatedNormalStaysInsideItsBounds) {
  torch::manual_seed(0);
  auto t = torch::empty({200000});
  trunc_normal_(t, 1.0, -0.5, 0.5);
  EXPECT_GE(t.min().item<double>(), -0.5);
  EXPECT_LE(t.max().item<double>(), 0.5);
  EXPECT_NEAR(t.mean().item<double>(), 0.0, 0.01);
  EXPECT_GT(t.std().item<double>(), 0.25);  // close to uniform on [-0.5, 0.5] (std 0.289), not collapsed
}

}  // namespace
}  // namespace voxfit::models
