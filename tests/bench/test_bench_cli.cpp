// `voxfit bench` end to end on the CPU with the registry's real networks, at tiny batches.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "bench/reference_line.h"
#include "support/test_support.h"
#include "voxfit/bench/benchmark.h"
#include "voxfit/core/error.h"

namespace voxfit {
namespace {

using test::run_voxfit;

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string line; std::getline(ss, line);) out.push_back(line);
  return out;
}

const std::string kTiny = " --device cpu --threads 2 --batch 1 --steps 1 ";

class BenchCli : public test::TempDirTest {};

TEST_F(BenchCli, Resnet50PrintsTheReferenceLineSummaryAndJson) {
  const auto json = dir() / "r50.json";
  const auto r =
      run_voxfit("bench --model resnet50 --precision float32 --iterations 3" + kTiny + "--json " + json.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = lines_of(r.out);
  ASSERT_GE(lines.size(), 5u) << r.out;
  EXPECT_TRUE(std::regex_match(lines[0], test::reference_line_format())) << lines[0];
  EXPECT_EQ(lines[0].rfind("Namespace(device='cpu', model='resnet50', precision='float32', train=False) "
                           "Iteration 0, ",
                           0),
            0u)
      << lines[0];
  EXPECT_NE(lines[0].find("Iteration 2, "), std::string::npos);
  EXPECT_EQ(lines[0].find("Iteration 3, "), std::string::npos);
  EXPECT_EQ(lines[1].rfind("steady state: ", 0), 0u) << lines[1];
  EXPECT_NE(lines[1].find("(mean of iterations 1-2, 1 images each)"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[2].rfind("vs rtx3090: ", 0), 0u) << lines[2];
  EXPECT_NE(lines[2].find("(published 1494 images/s, resnet50 float32)"), std::string::npos) << lines[2];
  EXPECT_EQ(lines[3].rfind("vs a40: ", 0), 0u) << lines[3];
  EXPECT_EQ(lines[4].rfind("settings: cpu, float32, batch 1 x 1 steps, random input", 0), 0u) << lines[4];

  std::ifstream in(json);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("line"), lines[0]);
  const double steady = j.at("steady_state").at("images_per_s");
  ASSERT_EQ(j.at("comparisons").size(), 2u);
  EXPECT_EQ(j["comparisons"][0].at("card"), "rtx3090");
  EXPECT_DOUBLE_EQ(j["comparisons"][0].at("ratio").get<double>(), steady / 1494);
  EXPECT_EQ(j["comparisons"][1].at("card"), "a40");
  EXPECT_DOUBLE_EQ(j["comparisons"][1].at("ratio").get<double>(), steady / 1118);
  EXPECT_EQ(j.at("settings").at("tf32_matmul"), true);
  EXPECT_EQ(j.at("settings").at("cuda_graph"), false);
}

TEST_F(BenchCli, TrainingRunSaysTrueAndComparesWithNothing) {
  const auto r = run_voxfit("bench --model resnet50 --precision float32 --train --iterations 2" + kTiny +
                            "--channels-last --input zeros --attention math");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = lines_of(r.out);
  ASSERT_GE(lines.size(), 3u) << r.out;
  EXPECT_TRUE(std::regex_match(lines[0], test::reference_line_format())) << lines[0];
  EXPECT_NE(lines[0].find("train=True)"), std::string::npos);
  EXPECT_EQ(r.out.find("vs rtx3090"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("vs published: none (the published numbers are for inference)"), std::string::npos);
  EXPECT_NE(r.out.find("zeros input"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("channels-last on"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attention math"), std::string::npos) << r.out;
}

TEST_F(BenchCli, BadOptionsAreOneLineErrorsWithExitTwo) {
  const struct {
    const char* args;
    const char* mentions;
  } cases[] = {
      {"--model resnet5", "resnet5"},
      {"--model unetr", "not a 2D image classifier"},
      {"--precision float64", "float64"},
      {"--batch 0", "--batch"},
      {"--steps 0", "--steps"},
      {"--iterations 1", "--iterations"},
      {"--precision float16", "float32"},  // float16 needs CUDA
      {"--tf32 maybe", "--tf32"},
      {"--input ones", "--input"},
      {"--channels-last=sideways", "--channels-last"},
      {"--device gpu", "--device"},
      {"--attention flash", "--attention"},
      {"--reference /nonexistent/ref.csv", "/nonexistent/ref.csv"},
  };
  for (const auto& c : cases) {
    const std::string precision =
        std::string(c.args).find("--precision") == std::string::npos ? " --precision float32" : "";
    const auto r = run_voxfit(std::string("bench --device cpu ") + c.args + precision);
    const bool io_error = std::string(c.args).find("--reference") != std::string::npos;
    EXPECT_EQ(r.exit_code, io_error ? 1 : 2) << c.args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.mentions), std::string::npos) << c.args << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << c.args << ": " << r.out;
  }
}

TEST_F(BenchCli, RegistryModelIsBuiltForTheProtocol) {
  bench::BenchOptions o;
  o.precision = bench::Precision::kFloat32;
  o.channels_last = true;
  const auto net = bench::make_bench_model(o);
  EXPECT_EQ(net->task(), models::TaskKind::kClassification2d);
  EXPECT_NO_THROW(net->check_input({1, 3, 224, 224}));
  bool conv_seen = false;
  for (const auto& p : net->parameters())
    if (p.dim() == 4) {
      conv_seen = true;
      EXPECT_TRUE(p.is_contiguous(at::MemoryFormat::ChannelsLast));
    }
  EXPECT_TRUE(conv_seen);
  EXPECT_TRUE(bench::uses_channels_last(o, *net));
  o.channels_last.reset();  // automatic: off on the CPU
  EXPECT_FALSE(bench::uses_channels_last(o, *bench::make_bench_model(o)));
  // ...and on CUDA for the convolutional ResNet, not for the ViT (one patch convolution).
  auto cuda = o;
  cuda.device = torch::Device(torch::kCUDA, 0);
  EXPECT_TRUE(bench::uses_channels_last(cuda, *net));
  o.model = "vit_base_patch16_224";
  const auto vit = bench::make_bench_model(o);
  EXPECT_EQ(vit->task(), models::TaskKind::kClassification2d);
  EXPECT_FALSE(bench::uses_channels_last(cuda, *vit));
  o.model = "unetr";
  EXPECT_THROW(bench::make_bench_model(o), ConfigError);
}

}  // namespace
}  // namespace voxfit
