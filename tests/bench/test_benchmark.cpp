#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "bench/reference_line.h"
#include "support/test_support.h"
#include "voxfit/bench/benchmark.h"
#include "voxfit/bench/reference_table.h"
#include "voxfit/bench/report.h"
#include "voxfit/core/error.h"
#include "voxfit/core/runtime.h"

namespace voxfit {
namespace {

using bench::BenchOptions;
using bench::BenchResult;
using bench::IterationTiming;

// The sample line of ../shared/reference/README.md, as the reference benchmark printed it.
const char* const kReferenceSample =
    "Namespace(device=0, model='resnet50', precision='float16', train=False) Iteration 0, 2294.06 "
    "images/s in 0.837s. Iteration 1, 2391.29 images/s in 0.803s.";

const std::regex kIterationItem(R"(Iteration (\d+), (\d+\.\d{2}) images/s in (\d+\.\d{3})s\.)");

// The smallest network the protocol can time: one convolution (so it counts as convolutional for
// the channels-last choice), global pooling and a classifier. It records what it was fed.
class TinyClassifierImpl : public models::NetworkImpl {
 public:
  TinyClassifierImpl(int64_t in_channels, int64_t classes)
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_channels, 8, 3).padding(1)))),
        fc(register_module("fc", torch::nn::Linear(8, classes))) {}
  std::vector<torch::Tensor> forward(const torch::Tensor& x) override {
    last_input_shape = x.sizes().vec();
    last_input_abs_sum = x.abs().sum().item<double>();
    last_input_channels_last = x.is_contiguous(at::MemoryFormat::ChannelsLast);
    auto h = torch::relu(conv(x));
    return {fc(torch::adaptive_avg_pool2d(h, {1, 1}).flatten(1))};
  }
  models::TaskKind task() const override { return models::TaskKind::kClassification2d; }
  void check_input(const std::vector<int64_t>&) const override {}

  torch::nn::Conv2d conv;
  torch::nn::Linear fc;
  std::vector<int64_t> last_input_shape;
  double last_input_abs_sum = -1.0;
  bool last_input_channels_last = false;
};

BenchOptions tiny_options() {
  BenchOptions o;
  o.model = "tiny";
  o.precision = bench::Precision::kFloat32;
  o.device = torch::kCPU;
  o.batch = 2;
  o.steps = 3;
  o.iterations = 4;
  o.image_size = 16;
  o.num_classes = 10;
  return o;
}

std::shared_ptr<TinyClassifierImpl> tiny_net(const BenchOptions& o) {
  return std::make_shared<TinyClassifierImpl>(o.in_channels, o.num_classes);
}

BenchResult synthetic_result(std::vector<double> seconds) {
  BenchResult r;
  r.options = tiny_options();
  r.options.batch = 64;
  r.options.steps = 30;
  r.device_name = "cpu";
  for (std::size_t i = 0; i < seconds.size(); ++i)
    r.iterations.push_back(IterationTiming{static_cast<int>(i), 1920, seconds[i]});
  return r;
}

std::vector<bench::ReferenceRow> shipped_table() {
  return bench::load_reference_table(test::source_dir() / "data" / "reference" / "autodl_seed.csv");
}

class Bench : public test::TempDirTest {};

TEST_F(Bench, FormatRegexAcceptsTheReferenceSample) {
  EXPECT_TRUE(std::regex_match(kReferenceSample, test::reference_line_format()));
  // ...and is strict enough to reject near misses.
  EXPECT_FALSE(std::regex_match(std::string(kReferenceSample) + " ", test::reference_line_format()));
  EXPECT_FALSE(std::regex_match(std::string("Namespace(device=0, model='resnet50', precision='float16', "
                                            "train=False) Iteration 0, 2294.1 images/s in 0.837s."),
                                test::reference_line_format()));
}

TEST_F(Bench, PrintedLineMatchesTheReferenceFormatAndStreamsEachIteration) {
  const auto o = tiny_options();
  std::vector<int> streamed;
  const BenchResult r =
      bench::run_benchmark(tiny_net(o), o, [&](const IterationTiming& it) { streamed.push_back(it.index); });
  const std::string line = bench::reference_line(r);
  EXPECT_TRUE(std::regex_match(line, test::reference_line_format())) << line;
  EXPECT_EQ(line.rfind("Namespace(device='cpu', model='tiny', precision='float32', train=False) Iteration 0, ", 0), 0u)
      << line;
  EXPECT_EQ(streamed, (std::vector<int>{0, 1, 2, 3}));
  ASSERT_EQ(r.iterations.size(), 4u);
  // Streaming the Namespace and each iteration's text reproduces the line exactly.
  std::string streamed_line = bench::namespace_text(o);
  for (const auto& it : r.iterations) streamed_line += " " + bench::iteration_text(it);
  EXPECT_EQ(streamed_line, line);
}

TEST_F(Bench, IterationArithmeticMatchesPrintedNumbers) {
  auto o = tiny_options();
  o.batch = 3;
  o.steps = 2;
  const BenchResult r = bench::run_benchmark(tiny_net(o), o);
  const std::string line = bench::reference_line(r);
  int n = 0;
  for (std::sregex_iterator m(line.begin(), line.end(), kIterationItem), end; m != end; ++m, ++n) {
    const IterationTiming& it = r.iterations.at(n);
    EXPECT_EQ(std::stoi((*m)[1]), n);
    EXPECT_EQ(it.images, 6);
    EXPECT_GT(it.seconds, 0.0);
    EXPECT_DOUBLE_EQ(it.images_per_s(), 6.0 / it.seconds);
    // The printed rate is images / seconds, up to the rounding of both printed numbers.
    const double printed_rate = std::stod((*m)[2]);
    const double printed_s = std::stod((*m)[3]);
    EXPECT_NEAR(printed_rate, it.images_per_s(), 0.005 + 1e-9);
    EXPECT_NEAR(printed_s, it.seconds, 0.0005 + 1e-12);
    if (printed_s >= 0.002) {
      EXPECT_LE(printed_rate, 6.0 / (printed_s - 0.0005) + 0.005);
      EXPECT_GE(printed_rate, 6.0 / (printed_s + 0.0005) - 0.005);
    }
  }
  EXPECT_EQ(n, o.iterations);
}

TEST_F(Bench, SteadyStateIsTheMeanOfIterationsAfterTheFirst) {
  const BenchResult r = synthetic_result({10.0, 0.2, 0.25, 0.2, 0.16});
  const double expected = (1920 / 0.2 + 1920 / 0.25 + 1920 / 0.2 + 1920 / 0.16) / 4;
  EXPECT_DOUBLE_EQ(r.steady_images_per_s(), expected);
  const std::string summary = bench::summary_text(r, {});
  EXPECT_NE(summary.find("steady state: 9720.00 images/s (mean of iterations 1-4, 1920 images each)"),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find("vs published: none for tiny float32"), std::string::npos) << summary;
}

TEST_F(Bench, ShippedReferenceTableHoldsTheEightPublishedNumbers) {
  const auto table = shipped_table();
  ASSERT_EQ(table.size(), 8u);
  EXPECT_EQ(table.front().card, "rtx3090");
  EXPECT_EQ(table.front().model, "resnet50");
  EXPECT_EQ(table.front().precision, "float16");
  EXPECT_DOUBLE_EQ(table.front().images_per_s, 2394);
  EXPECT_EQ(table.back().card, "a40");
  EXPECT_EQ(table.back().model, "vit_base_patch16_224");
  EXPECT_DOUBLE_EQ(table.back().images_per_s, 679);
}

TEST_F(Bench, RatiosOnlyForMatchingInferenceRows) {
  const auto table = shipped_table();
  auto c = bench::compare_with_reference(table, "resnet50", "float16", false, 4788);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].reference.card, "rtx3090");
  EXPECT_DOUBLE_EQ(c[0].ratio, 2.0);
  EXPECT_EQ(c[1].reference.card, "a40");
  EXPECT_DOUBLE_EQ(c[1].ratio, 4788.0 / 1893);
  c = bench::compare_with_reference(table, "vit_base_patch16_224", "float32", false, 1196);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_DOUBLE_EQ(c[0].ratio, 2.0);
  EXPECT_DOUBLE_EQ(c[1].reference.images_per_s, 679);
  EXPECT_TRUE(bench::compare_with_reference(table, "resnet50", "float16", true, 4788).empty());
  EXPECT_TRUE(bench::compare_with_reference(table, "tiny", "float32", false, 100).empty());

  auto r = synthetic_result({1.0, 0.4, 0.4, 0.4, 0.4});  // steady 4800 images/s
  r.options.model = "resnet50";
  r.options.precision = bench::Precision::kFloat16;
  c = bench::compare_with_reference(table, "resnet50", "float16", false, r.steady_images_per_s());
  const std::string summary = bench::summary_text(r, c);
  EXPECT_NE(summary.find("vs rtx3090: 2.01x (published 2394 images/s, resnet50 float16)\n"), std::string::npos)
      << summary;
  EXPECT_NE(summary.find("vs a40: 2.54x (published 1893 images/s, resnet50 float16)\n"), std::string::npos) << summary;
  r.options.train = true;
  EXPECT_NE(bench::summary_text(r, {}).find("none (the published numbers are for inference)"), std::string::npos);
}

TEST_F(Bench, MalformedReferenceTableNamesFileAndLine) {
  const auto csv = dir() / "ref.csv";
  std::ofstream(csv) << "card,model,precision,images_per_s\nrtx3090,resnet50,float16,fast\n";
  try {
    bench::load_reference_table(csv);
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("ref.csv:2:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fast"), std::string::npos) << e.what();
  }
  std::ofstream(csv) << "card,model,images_per_s\n";
  EXPECT_THROW(bench::load_reference_table(csv), IoError);
  std::ofstream(csv) << "card,model,precision,images_per_s\na40,resnet50,float16\n";
  EXPECT_THROW(bench::load_reference_table(csv), IoError);
  EXPECT_THROW(bench::load_reference_table(dir() / "missing.csv"), IoError);
}

TEST_F(Bench, JsonHoldsLineIterationsSteadyStateAndComparisons) {
  auto o = tiny_options();
  const BenchResult r = bench::run_benchmark(tiny_net(o), o);
  const std::vector<bench::Comparison> comps = {{{"rtx3090", "tiny", "float32", 10.0}, r.steady_images_per_s() / 10.0}};
  const auto path = dir() / "out" / "bench.json";
  std::filesystem::create_directories(path.parent_path());
  bench::write_result_json(path, r, comps, "ref.csv");
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("line"), bench::reference_line(r));
  EXPECT_EQ(j.at("model"), "tiny");
  EXPECT_EQ(j.at("precision"), "float32");
  EXPECT_EQ(j.at("train"), false);
  EXPECT_EQ(j.at("device").at("type"), "cpu");
  EXPECT_EQ(j.at("settings").at("images_per_iteration"), 6);
  EXPECT_EQ(j.at("settings").at("input"), "random");
  EXPECT_EQ(j.at("settings").at("cuda_graph"), false);
  EXPECT_EQ(j.at("settings").at("channels_last"), false);
  EXPECT_EQ(j.at("provenance").at("libtorch"), torch_version());
  EXPECT_EQ(j.at("provenance").at("voxfit"), voxfit_version());
  EXPECT_FALSE(j.at("provenance").at("commit").get<std::string>().empty());
  EXPECT_FALSE(j.at("provenance").at("host").get<std::string>().empty());
  ASSERT_EQ(j.at("iterations").size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(j["iterations"][i].at("index"), static_cast<int>(i));
    EXPECT_DOUBLE_EQ(j["iterations"][i].at("seconds").get<double>(), r.iterations[i].seconds);
    EXPECT_DOUBLE_EQ(j["iterations"][i].at("images_per_s").get<double>(), r.iterations[i].images_per_s());
  }
  EXPECT_DOUBLE_EQ(j.at("steady_state").at("images_per_s").get<double>(), r.steady_images_per_s());
  EXPECT_EQ(j.at("steady_state").at("first_iteration"), 1);
  EXPECT_EQ(j.at("steady_state").at("last_iteration"), 3);
  EXPECT_EQ(j.at("reference_file"), "ref.csv");
  ASSERT_EQ(j.at("comparisons").size(), 1u);
  EXPECT_EQ(j["comparisons"][0].at("card"), "rtx3090");
  EXPECT_DOUBLE_EQ(j["comparisons"][0].at("ratio").get<double>(), r.steady_images_per_s() / 10.0);
  // Written atomically: nothing but the result is left in the folder.
  EXPECT_EQ(
      std::distance(std::filesystem::directory_iterator(path.parent_path()), std::filesystem::directory_iterator()), 1);
}

TEST_F(Bench, TrainingTakesOptimiserStepsAndInferenceLeavesWeightsAlone) {
  auto o = tiny_options();
  auto net = tiny_net(o);
  const auto before = net->fc->weight.detach().clone();
  bench::run_benchmark(net, o);
  EXPECT_FALSE(net->is_training());
  EXPECT_TRUE(torch::equal(net->fc->weight.detach(), before));

  o.train = true;
  const BenchResult r = bench::run_benchmark(net, o);
  EXPECT_TRUE(net->is_training());
  EXPECT_FALSE(torch::allclose(net->fc->weight.detach(), before));
  EXPECT_NE(bench::reference_line(r).find("train=True) Iteration 0, "), std::string::npos);
}

TEST_F(Bench, ChannelsLastIsAutomaticOnlyOnCudaAndCanBeForced) {
  auto o = tiny_options();
  auto net = tiny_net(o);
  EXPECT_FALSE(bench::run_benchmark(net, o).channels_last);  // the CPU: off unless asked
  EXPECT_FALSE(net->last_input_channels_last);
  o.channels_last = true;
  const BenchResult r = bench::run_benchmark(net, o);
  EXPECT_TRUE(r.channels_last);
  EXPECT_TRUE(net->conv->weight.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(net->last_input_channels_last);
  EXPECT_FALSE(r.cuda_graph);  // graphs are a CUDA feature
  EXPECT_NE(bench::summary_text(r, {}).find("channels-last on, cuda graph off"), std::string::npos);
}

TEST_F(Bench, InputIsTheProtocolsShapeAndFill) {
  auto o = tiny_options();
  o.batch = 5;
  o.iterations = 2;
  auto net = tiny_net(o);
  bench::run_benchmark(net, o);
  EXPECT_EQ(net->last_input_shape, (std::vector<int64_t>{5, 3, 16, 16}));
  EXPECT_GT(net->last_input_abs_sum, 0.0);  // random by default
  o.input = bench::InputFill::kZeros;
  bench::run_benchmark(net, o);
  EXPECT_EQ(net->last_input_abs_sum, 0.0);
}

TEST_F(Bench, InvalidOptionsAreRejectedBeforeAnyWork) {
  auto o = tiny_options();
  o.batch = 0;
  EXPECT_THROW(bench::validate(o), ConfigError);
  o = tiny_options();
  o.steps = -1;
  EXPECT_THROW(bench::validate(o), ConfigError);
  o = tiny_options();
  o.iterations = 1;
  EXPECT_THROW(bench::run_benchmark(tiny_net(o), o), ConfigError);
  o = tiny_options();
  o.precision = bench::Precision::kFloat16;
  try {
    bench::validate(o);
    FAIL() << "float16 on the CPU accepted";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("float32"), std::string::npos) << e.what();
    EXPECT_EQ(e.exit_code(), 2);
  }
  if (!cuda_available()) {
    o = tiny_options();
    o.device = torch::Device(torch::kCUDA, 0);
    EXPECT_THROW(bench::validate(o), UnsupportedError);
  }
  o = tiny_options();
  o.precision = bench::parse_precision("bfloat16", "--precision");
  EXPECT_EQ(bench::dtype_of(o.precision), torch::kBFloat16);
  EXPECT_EQ(bench::to_string(o.precision), "bfloat16");
  EXPECT_THROW(bench::validate(o), UnsupportedError);  // reduced precision: CUDA only
  EXPECT_THROW(bench::parse_precision("float64", "--precision"), ConfigError);
  // One vocabulary: the training names mean the same pure dtypes here; mixed precision is refused.
  EXPECT_EQ(bench::parse_precision("fp16", "--precision"), bench::Precision::kFloat16);
  EXPECT_EQ(bench::parse_precision("bf16", "--precision"), bench::Precision::kBfloat16);
  EXPECT_EQ(bench::parse_precision("fp32", "--precision"), bench::Precision::kFloat32);
  EXPECT_THROW(bench::parse_precision("16-mixed", "--precision"), ConfigError);
  EXPECT_THROW(bench::parse_input_fill("ones"), ConfigError);
}

}  // namespace
}  // namespace voxfit
