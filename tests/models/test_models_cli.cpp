// `voxfit models` as a user runs it, and the model options train/sweep/bench share.
#include <gtest/gtest.h>

#include <algorithm>

#include "support/test_support.h"
#include "voxfit/cli/model_options.h"
#include "voxfit/core/error.h"

namespace voxfit {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(ModelsCommand, ListsEveryNetworkWithItsReferenceCount) {
  const auto r = test::run_voxfit("models");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* line : {"unet3d", "31,205,254", "unetr", "92,784,046", "swin_unetr", "62,187,296", "resnet50",
                           "25,557,032", "vit_base_patch16_224", "86,567,656", "3D segmentation", "2D classification"})
    EXPECT_TRUE(contains(r.out, line)) << line << " missing from:\n" << r.out;
}

TEST(ModelsCommand, UnetrAtItsReferenceSetting) {
  const auto r = test::run_voxfit("models --model unetr");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "92,784,046")) << r.out;
  EXPECT_TRUE(contains(r.out, "[1, 1, 96, 96, 96]")) << r.out;
  EXPECT_TRUE(contains(r.out, "training: [1, 14, 96, 96, 96]")) << r.out;
  EXPECT_TRUE(contains(r.out, "1.38 GiB")) << r.out;  // 92,784,046 x 16 B
  EXPECT_TRUE(contains(r.out, "qkv_bias=false")) << r.out;
}

TEST(ModelsCommand, Unet3dShowsDeepSupervisionOutputsForTheBatch) {
  const auto r = test::run_voxfit("models --model unet3d --batch 2 --patch 64,128,128 --classes 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[2, 1, 64, 128, 128]")) << r.out;
  for (const char* s : {"training: [2, 3, 64, 128, 128]", "[2, 3, 32, 64, 64]", "[2, 3, 16, 32, 32]",
                        "[2, 3, 8, 16, 16]", "[2, 3, 4, 8, 8]", "eval:     [2, 3, 64, 128, 128]"})
    EXPECT_TRUE(contains(r.out, s)) << s << " missing from:\n" << r.out;
}

TEST(ModelsCommand, ModelParametersAndTheTwoDimensionalDefaults) {
  auto r = test::run_voxfit("models --model swin_unetr --feature-size 24");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "15,703,304")) << r.out;
  r = test::run_voxfit("models --model vit_base_patch16_224 --batch 4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "86,567,656")) << r.out;
  EXPECT_TRUE(contains(r.out, "[4, 3, 224, 224]")) << r.out;
  EXPECT_TRUE(contains(r.out, "[4, 1000]")) << r.out;
}

TEST(ModelsCommand, ErrorsAreOneLineWithTheRightExitCode) {
  auto r = test::run_voxfit("models --model swin_unetr --patch 96,96,80");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "W=80")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  r = test::run_voxfit("models --model unetr --depths 2,2,2,2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "--depths is not a parameter of unetr")) << r.err;

  r = test::run_voxfit("models --model unet");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "unknown model 'unet'")) << r.err;

  r = test::run_voxfit("models --model unetr --attention fast");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "--attention")) << r.err;
}

// Parses `args` the way a command that builds a network does.
models::ModelContext context_for(const std::vector<std::string>& args, const std::string& model) {
  cli::CommandSpec spec{"test", "voxfit test", "test"};
  cli::add_model_options(spec);
  cli::po::variables_map vm;
  EXPECT_TRUE(cli::parse_command(spec, args, vm));
  return cli::model_context_from(vm, model);
}

TEST(ModelOptions, ContextFromTheCommandLine) {
  auto ctx = context_for({"--patch", "96,96,64", "--in-channels", "2", "--checkpoint", "blocks", "--attention", "math",
                          "--channels-last", "--feature-size", "24", "--use-v2", "true"},
                         "swin_unetr");
  EXPECT_EQ(ctx.patch, (std::vector<int64_t>{96, 96, 64}));
  EXPECT_EQ(ctx.in_channels, 2);
  EXPECT_EQ(ctx.num_classes, 14);
  EXPECT_EQ(ctx.checkpoint, models::CheckpointMode::kBlocks);
  EXPECT_EQ(ctx.attention, models::AttentionMode::kMath);
  EXPECT_TRUE(ctx.channels_last);
  EXPECT_EQ(ctx.params, (std::map<std::string, std::string>{{"feature_size", "24"}, {"use_v2", "true"}}));

  ctx = context_for({"--patch", "128"}, "resnet50");
  EXPECT_EQ(ctx.patch, (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(ctx.in_channels, 3);
  EXPECT_EQ(ctx.num_classes, 1000);
  EXPECT_FALSE(ctx.channels_last);
  EXPECT_EQ(ctx.checkpoint, models::CheckpointMode::kNone);
}

TEST(ModelOptions, BadValuesNameTheOption) {
  const auto message = [](const std::vector<std::string>& args, const std::string& model) {
    try {
      context_for(args, model);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_TRUE(contains(message({"--patch", "96,96"}, "unetr"), "--patch")) << message({"--patch", "96,96"}, "unetr");
  EXPECT_TRUE(contains(message({"--patch", "96,x,96"}, "unetr"), "--patch"));
  EXPECT_TRUE(contains(message({"--classes", "0"}, "unetr"), "--classes must be >= 1"));
  EXPECT_TRUE(contains(message({"--checkpoint", "some"}, "unetr"), "--checkpoint: expected none, blocks or all"));
  EXPECT_TRUE(contains(message({"--recompute", "some"}, "unetr"), "--recompute: expected none, blocks or all"));
  EXPECT_TRUE(contains(message({"--window-size", "5"}, "unetr"), "--window-size is not a parameter of unetr"));
}

TEST(ModelOptions, SweepsTakeOnlyEachModelsOwnParameters) {
  cli::CommandSpec spec{"test", "voxfit test", "test"};
  cli::add_model_options(spec);
  cli::po::variables_map vm;
  ASSERT_TRUE(cli::parse_command(spec, {"--window-size", "5", "--feature-size", "24"}, vm));
  const auto unetr = cli::model_context_from(vm, "unetr", /*only_own_params=*/true);
  EXPECT_EQ(unetr.params, (std::map<std::string, std::string>{{"feature_size", "24"}}));
  const auto swin = cli::model_context_from(vm, "swin_unetr", /*only_own_params=*/true);
  EXPECT_EQ(swin.params, (std::map<std::string, std::string>{{"feature_size", "24"}, {"window_size", "5"}}));
  EXPECT_THROW(cli::model_context_from(vm, "unetr"), ConfigError);
}

}  // namespace
}  // namespace voxfit
