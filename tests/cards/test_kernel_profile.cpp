// Kernel attribution (kernels linked to their operators, FLOPs and bytes), the profile file, the
// Kineto trace on this build, and `voxfit cards predict` from saved profiles.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/test_support.h"
#include "voxfit/cards/kernel_attribution.h"
#include "voxfit/cards/kernel_profile.h"
#include "voxfit/cards/profiler.h"
#include "voxfit/core/error.h"

namespace voxfit::cards {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

TraceEvent op(const std::string& name, std::int64_t start, std::int64_t dur, std::uint64_t corr, std::uint64_t flops,
              std::vector<std::vector<std::int64_t>> shapes = {}, std::vector<std::string> dtypes = {}) {
  TraceEvent e;
  e.name = name;
  e.thread = 1;
  e.start_ns = start;
  e.duration_ns = dur;
  e.correlation = corr;
  e.flops = flops;
  e.shapes = std::move(shapes);
  e.dtypes = std::move(dtypes);
  return e;
}

TraceEvent kernel(const std::string& name, std::int64_t dur, std::uint64_t linked, const std::string& kind = "kernel") {
  TraceEvent e;
  e.name = name;
  e.on_device = true;
  e.kind = kind;
  e.duration_ns = dur;
  e.linked_correlation = linked;
  return e;
}

TEST(OpCost, ElementSizesOfProfilerTypeNames) {
  EXPECT_EQ(element_bytes("c10::Half"), 2);
  EXPECT_EQ(element_bytes("c10::BFloat16"), 2);
  EXPECT_EQ(element_bytes("float"), 4);
  EXPECT_EQ(element_bytes("long int"), 8);
  EXPECT_EQ(element_bytes("Scalar"), 0);
  EXPECT_EQ(element_bytes(""), 0);
}

TEST(OpCost, EstimatesFromShapesAgainstHandCounts) {
  // conv3d, stride 1 same padding: 2 * N * Cout * Cin * k^3 * D*H*W
  OpCost c = estimate_op_cost("aten::conv3d", {{2, 4, 8, 8, 8}, {16, 4, 3, 3, 3}, {}}, {"float", "float", ""}, 0);
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 2 * 16 * 4 * 27 * 512);
  EXPECT_DOUBLE_EQ(c.bytes, (2 * 4 * 512 + 16 * 4 * 27) * 4.0 + 2 * 16 * 512 * 4.0);
  EXPECT_TRUE(c.matrix);
  EXPECT_TRUE(c.convolution);
  // even kernel = patch embedding, stride = kernel: 16^3 voxels -> 1 of 16^3 patches per axis
  c = estimate_op_cost("aten::conv3d", {{1, 1, 32, 32, 32}, {768, 1, 16, 16, 16}}, {"c10::Half", "c10::Half"}, 0);
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 768 * 4096 * 8);
  // transposed, stride = kernel 2: every input voxel writes a 2^3 block
  c = estimate_op_cost("aten::conv_transpose3d", {{1, 8, 4, 4, 4}, {8, 4, 2, 2, 2}}, {"c10::Half", "c10::Half"}, 0);
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 8 * 4 * 8 * 64);
  // backward of a strided convolution: twice the forward on the (smaller) output grid, twice again
  c = estimate_op_cost("aten::convolution_backward", {{2, 16, 4, 4, 4}, {2, 4, 8, 8, 8}, {16, 4, 3, 3, 3}},
                       {"float", "float", "float"}, 0);
  EXPECT_DOUBLE_EQ(c.flops, 4.0 * 2 * 16 * 4 * 27 * 64);
  // mm and the profiler's own count winning over the estimate
  c = estimate_op_cost("aten::mm", {{64, 128}, {128, 32}}, {"float", "float"}, 0);
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 64 * 128 * 32);
  EXPECT_DOUBLE_EQ(c.bytes, (64 * 128 + 128 * 32 + 64 * 32) * 4.0);
  EXPECT_DOUBLE_EQ(estimate_op_cost("aten::mm", {{64, 128}, {128, 32}}, {"float", "float"}, 7).flops, 7.0);
  // fused attention, q k v [2, 12, 197, 64]
  c = estimate_op_cost("aten::scaled_dot_product_attention", {{2, 12, 197, 64}, {2, 12, 197, 64}, {2, 12, 197, 64}},
                       {"c10::Half", "c10::Half", "c10::Half"}, 0);
  EXPECT_DOUBLE_EQ(c.flops, 238442496.0);
  // an elementwise op: no FLOP estimate, inputs + an output as large as the largest input
  c = estimate_op_cost("aten::relu", {{10, 10}}, {"c10::Half"}, 0);
  EXPECT_EQ(c.flops, 0);
  EXPECT_DOUBLE_EQ(c.bytes, 400);
  EXPECT_FALSE(c.matrix);
}

TEST(Attribution, KernelsGetTheirOperatorsFlopsPerStep) {
  const std::vector<std::vector<std::int64_t>> conv_shapes{{8, 64, 56, 56}, {64, 64, 3, 3}};
  std::vector<TraceEvent> events{
      // conv2d (the profiler's FLOPs) > cudnn_convolution (launches a GEMM and a layout kernel)
      op("aten::conv2d", 0, 1000, 10, 4000, conv_shapes, {"float", "float"}),
      op("aten::cudnn_convolution", 100, 800, 11, 0, conv_shapes, {"float", "float"}),
      kernel("sm80_xmma_fprop_implicit_gemm_tf32", 3000, 11),
      kernel("cudnn::nchwToNhwcKernel", 1000, 11),
      // an add with the profiler's FLOPs, one elementwise kernel
      op("aten::add", 2000, 100, 20, 50, {{1000}, {1000}}, {"float", "float"}),
      kernel("vectorized_elementwise_kernel", 500, 20),
      // a copy whose operator is not in the trace
      kernel("Memcpy DtoD (Device -> Device)", 200, 99, "memcpy"),
      // second step, same launches
      op("aten::conv2d", 5000, 1000, 30, 4000, conv_shapes, {"float", "float"}),
      op("aten::cudnn_convolution", 5100, 800, 31, 0, conv_shapes, {"float", "float"}),
      kernel("sm80_xmma_fprop_implicit_gemm_tf32", 3000, 31),
      kernel("cudnn::nchwToNhwcKernel", 1000, 31),
      op("aten::add", 7000, 100, 40, 50, {{1000}, {1000}}, {"float", "float"}),
      kernel("vectorized_elementwise_kernel", 500, 40),
  };
  AttributionOptions o;
  o.steps = 2;
  o.tf32_cudnn = true;
  const auto records = attribute_kernels(events, o);
  ASSERT_EQ(records.size(), 4u);
  const auto find = [&](const std::string& name) {
    for (const auto& r : records)
      if (r.name == name) return r;
    ADD_FAILURE() << "no record " << name;
    return KernelRecord{};
  };
  const KernelRecord gemm = find("sm80_xmma_fprop_implicit_gemm_tf32");
  EXPECT_EQ(gemm.op, "aten::cudnn_convolution");
  EXPECT_EQ(gemm.flops_op, "aten::conv2d");
  EXPECT_EQ(gemm.calls, 1);
  EXPECT_DOUBLE_EQ(gemm.time_us, 3.0);
  EXPECT_DOUBLE_EQ(gemm.flops, 4000);  // all of the convolution's FLOPs, per step
  EXPECT_EQ(gemm.math, MathKind::kTf32);
  const double conv_bytes = (8 * 64 * 56 * 56 + 64 * 64 * 9 + 8 * 64 * 56 * 56) * 4.0;
  EXPECT_DOUBLE_EQ(gemm.bytes, conv_bytes);
  const KernelRecord layout = find("cudnn::nchwToNhwcKernel");
  EXPECT_EQ(layout.flops, 0);
  EXPECT_EQ(layout.math, MathKind::kFp32);
  const KernelRecord add = find("vectorized_elementwise_kernel");
  EXPECT_DOUBLE_EQ(add.flops, 50);
  EXPECT_DOUBLE_EQ(add.bytes, 3 * 1000 * 4.0);
  EXPECT_EQ(add.math, MathKind::kFp32);
  const KernelRecord copy = find("Memcpy DtoD (Device -> Device)");
  EXPECT_EQ(copy.kind, "memcpy");
  EXPECT_EQ(copy.op, "");
  EXPECT_DOUBLE_EQ(copy.time_us, 0.1);
  EXPECT_EQ(records.front().name, gemm.name);  // longest first
}

TEST(Attribution, HalfMatrixProductsUseTensorCoresAndFp32OnesTf32OnlyWhenAllowed) {
  std::vector<TraceEvent> events{
      op("aten::mm", 0, 100, 1, 1000, {{4, 4}, {4, 4}}, {"c10::Half", "c10::Half"}), kernel("ampere_fp16_gemm", 10, 1),
      op("aten::mm", 200, 100, 2, 1000, {{4, 4}, {4, 4}}, {"float", "float"}), kernel("ampere_sgemm", 10, 2)};
  AttributionOptions o;
  o.tf32_cudnn = true;  // convolutions only: the float mm stays FP32
  auto records = attribute_kernels(events, o);
  ASSERT_EQ(records.size(), 2u);
  for (const auto& r : records)
    EXPECT_EQ(r.math, r.name == "ampere_fp16_gemm" ? MathKind::kFp16Tensor : MathKind::kFp32);
  o.tf32_matmul = true;
  records = attribute_kernels(events, o);
  for (const auto& r : records)
    EXPECT_EQ(r.math, r.name == "ampere_fp16_gemm" ? MathKind::kFp16Tensor : MathKind::kTf32);
}

KernelProfile sample_profile() {
  KernelProfile p;
  p.model = "resnet50";
  p.precision = "float16";
  p.batch = 64;
  p.input_shape = {64, 3, 224, 224};
  p.device_name = "NVIDIA H200";
  p.card = "h200_sxm";
  p.tf32_matmul = p.tf32_cudnn = true;
  p.profiled_steps = 5;
  KernelRecord gemm;
  gemm.name = "sm90_xmma_fprop";
  gemm.kind = "kernel";
  gemm.op = "aten::cudnn_convolution";
  gemm.flops_op = "aten::conv2d";
  gemm.math = MathKind::kFp16Tensor;
  gemm.calls = 53;
  gemm.time_us = 2000;
  gemm.flops = 5.2e10;  // 52 FLOP/B: below every card's FP16 ridge point
  gemm.bytes = 1.0e9;
  KernelRecord ew = gemm;
  ew.name = "vectorized_elementwise_kernel";
  ew.op = ew.flops_op = "aten::relu_";
  ew.math = MathKind::kFp32;
  ew.time_us = 1500;
  ew.flops = 0;
  ew.bytes = 6.0e9;
  p.kernels = {gemm, ew};
  p.wall_s_per_step = 0.004;
  return p;
}

class CardsProfile : public test::TempDirTest {};

TEST_F(CardsProfile, RoundTripsThroughItsJsonFile) {
  const KernelProfile p = sample_profile();
  save_profile(dir() / "p.json", p);
  const KernelProfile q = load_profile(dir() / "p.json");
  EXPECT_EQ(q.model, p.model);
  EXPECT_EQ(q.card, "h200_sxm");
  EXPECT_EQ(q.input_shape, p.input_shape);
  ASSERT_EQ(q.kernels.size(), 2u);
  EXPECT_EQ(q.kernels[0].math, MathKind::kFp16Tensor);
  EXPECT_DOUBLE_EQ(q.kernels[1].bytes, 6.0e9);
  EXPECT_DOUBLE_EQ(q.wall_s_per_step, 0.004);
  EXPECT_NEAR(q.overhead_s_per_step(), 0.0005, 1e-12);
}

TEST_F(CardsProfile, BadFilesAreOneLineErrorsNamingTheFile) {
  const fs::path f = dir() / "p.json";
  const auto expect_error = [&](const std::string& part) {
    try {
      load_profile(f);
      FAIL() << "expected IoError mentioning " << part;
    } catch (const IoError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(f.string()), std::string::npos) << what;
      EXPECT_NE(what.find(part), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  };
  expect_error("missing or unreadable");
  std::ofstream(f) << "{\"format\": \"voxfit-kernel-profile\", ";
  expect_error("not valid JSON");
  std::ofstream(f) << "{\"hello\": 1}";
  expect_error("not a voxfit kernel profile");
  json j = to_json(sample_profile());
  j["kernels"][1].erase("time_us");
  std::ofstream(f) << j.dump();
  expect_error("kernels[1]: missing field 'time_us'");
  j = to_json(sample_profile());
  j["wall_s_per_step"] = "fast";
  std::ofstream(f) << j.dump();
  expect_error("'wall_s_per_step' has the wrong type");
}

TEST_F(CardsProfile, PredictFromSavedProfilesWritesTablesAndChecksTheReference) {
  save_profile(dir() / "p.json", sample_profile());
  const auto r = test::run_voxfit("cards predict --profile " + (dir() / "p.json").string() + " --plot off --output " +
                                  (dir() / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| rtx3090 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Against the published numbers"), std::string::npos) << r.out;
  std::ifstream csv(dir() / "out" / "predictions.csv");
  std::map<std::string, double> per_card;
  std::string line;
  std::getline(csv, line);
  while (std::getline(csv, line)) {
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(line.find("\",") + 2));
    for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
    per_card[cells.at(5)] = std::stod(cells.at(6));
  }
  // The profiled card reproduces its measured 64 / 4 ms = 16000 images/s.
  EXPECT_NEAR(per_card.at("h200_sxm"), 16000, 0.1);
  // A slower card is slower, and the bandwidth-rich 3090 beats the A40 on this memory-heavy profile.
  EXPECT_LT(per_card.at("rtx3090"), per_card.at("h200_sxm"));
  EXPECT_GT(per_card.at("rtx3090"), per_card.at("a40"));
}

TEST_F(CardsProfile, PredictAndProfileFailClearlyOnBadInput) {
  auto r = test::run_voxfit("cards predict --profile " + (dir() / "none.json").string() + " --plot off --output " +
                            (dir() / "out").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find((dir() / "none.json").string()), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  r = test::run_voxfit("cards predict --output " + (dir() / "out").string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  // Architecture parameters are checked against the model, as train checks them, before any GPU work.
  r = test::run_voxfit("cards profile --model unet3d --train --feature-size 24 --output " + (dir() / "p.json").string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--feature-size is not a parameter of unet3d"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir() / "p.json"));
  if (!torch::cuda::is_available()) {
    r = test::run_voxfit("cards profile --model resnet50 --output " + (dir() / "p.json").string());
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("CUDA"), std::string::npos) << r.err;
  }
}

TEST(KinetoTrace, CpuOperatorsComeWithShapesAndFlops) {
  const auto a = torch::randn({16, 32});
  const auto b = torch::randn({32, 8});
  torch::Tensor c;
  const auto events = record_trace([&] { c = torch::mm(a, b); }, false);
  bool found = false;
  for (const auto& e : events) {
    if (e.on_device || e.name != "aten::mm") continue;
    found = true;
    EXPECT_EQ(e.flops, 2u * 16 * 32 * 8);
    ASSERT_GE(e.shapes.size(), 2u);
    EXPECT_EQ(e.shapes[0], (std::vector<std::int64_t>{16, 32}));
    EXPECT_EQ(e.dtypes[0], "float");
    EXPECT_GT(e.correlation, 0u);
  }
  EXPECT_TRUE(found) << events.size() << " events, none aten::mm";
}

}  // namespace
}  // namespace voxfit::cards
