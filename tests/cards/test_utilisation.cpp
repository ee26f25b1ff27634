// How close a profiled step comes to its card (`voxfit cards utilisation`): the step's counted
// FLOP/s against the card's GEMM rate, per operator class and per kernel, with DRAM traffic against
// the card's bandwidth; and the GEMM rate `cards profile` measures beside a profile (on a GPU).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "voxfit/cards/kernel_profile.h"
#include "voxfit/cards/utilisation.h"
#include "voxfit/core/error.h"
#include "voxfit/core/paths.h"
#include "voxfit/memory/card_table.h"

namespace voxfit::cards {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

KernelRecord record(const std::string& name, const std::string& op, double time_us, double flops, double bytes,
                    MathKind math = MathKind::kFp32, const std::string& kind = "kernel") {
  KernelRecord k;
  k.name = name;
  k.kind = kind;
  k.op = k.flops_op = op;
  k.math = math;
  k.calls = 1;
  k.time_us = time_us;
  k.flops = flops;
  k.bytes = bytes;
  return k;
}

// A 10 ms step on the H200 whose kernels take 8 ms: 4 TFLOP of convolutions and 1 of matrix
// products on fp16 tensor cores, a norm, a copy and an optimiser.
KernelProfile step_profile() {
  KernelProfile p;
  p.model = "unetr";
  p.precision = "fp16";
  p.train = true;
  p.batch = 2;
  p.input_shape = {2, 1, 96, 96, 96};
  p.device_name = "NVIDIA H200";
  p.card = "h200_sxm";
  p.profiled_steps = 3;
  p.wall_s_per_step = 0.010;
  p.kernels = {record("sm90_xmma_dgrad", "aten::convolution_backward", 3000, 3e12, 2e9, MathKind::kFp16Tensor),
               record("sm90_xmma_fprop", "aten::conv3d", 1000, 1e12, 1e9, MathKind::kFp16Tensor),
               record("cutlass_gemm|tn", "aten::mm", 1000, 1e12, 0.5e9, MathKind::kFp16Tensor),
               record("instance_norm_act_kernel",
                      "torch::autograd::CppNode<voxfit::kernels::(anonymous namespace)::InstanceNormActFunction>", 2000,
                      0, 4.8e9),
               record("Memcpy DtoD", "", 500, 0, 1e9, MathKind::kFp32, "memcpy"),
               record("fused_adamw_kernel", "aten::_fused_adamw_", 500, 0, 1.2e9)};
  return p;
}

const memory::CardTable& shipped() {
  static const memory::CardTable table = memory::load_card_table(card_table_path());
  return table;
}

TEST(Utilisation, TheStepsCountedFlopsOverItsWallTimeAgainstTheMeasuredGemmRate) {
  KernelProfile p = step_profile();
  p.gemm_tflops = 800;
  p.gemm_math = MathKind::kFp16Tensor;
  const memory::CardSpec* h200 = shipped().find("h200_sxm");
  ASSERT_NE(h200, nullptr);
  const Utilisation u = utilisation(p, h200, 0, 3);
  EXPECT_DOUBLE_EQ(u.flops, 5e12);
  EXPECT_NEAR(u.tflops, 500, 1e-9);  // 5 TFLOP in 10 ms of wall time, not in the 8 ms of kernels
  EXPECT_NEAR(u.kernel_s, 0.008, 1e-12);
  EXPECT_DOUBLE_EQ(u.reference.tflops, 800);
  EXPECT_NE(u.reference.source.find("measured fp16_tensor GEMM"), std::string::npos) << u.reference.source;
  EXPECT_NEAR(u.share, 0.625, 1e-12);
  EXPECT_DOUBLE_EQ(u.bandwidth_gbs, h200->bandwidth_gbs);

  // Classes, most time first; the convolutions' two kernels together.
  ASSERT_EQ(u.classes.size(), 5u);
  EXPECT_EQ(u.classes[0].name, "convolution");
  EXPECT_DOUBLE_EQ(u.classes[0].time_us, 4000);
  EXPECT_NEAR(u.classes[0].tflops(), 1000, 1e-9);
  EXPECT_EQ(u.classes[1].name, "normalisation");
  EXPECT_NEAR(u.classes[1].gb_per_s(), 2400, 1e-9);
  const auto find = [&](const std::string& name) {
    return *std::find_if(u.classes.begin(), u.classes.end(), [&](const UseRow& r) { return r.name == name; });
  };
  EXPECT_DOUBLE_EQ(find("matrix product").flops, 1e12);
  EXPECT_DOUBLE_EQ(find("copy / layout").time_us, 500);
  EXPECT_DOUBLE_EQ(find("optimiser").bytes, 1.2e9);

  // The top kernels, most time first, cut at 3.
  ASSERT_EQ(u.top.size(), 3u);
  EXPECT_EQ(u.top[0].name, "sm90_xmma_dgrad");
  EXPECT_EQ(u.top[1].name, "instance_norm_act_kernel");
  EXPECT_DOUBLE_EQ(u.top[0].time_us, 3000);

  const std::string md = utilisation_markdown(u);
  EXPECT_NE(md.find("5.000 TFLOP counted a step: 500.0 TFLOP/s, 62.5% of the measured fp16_tensor GEMM"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| normalisation | 2.000 | 25.0% | 0.0 | 0.0 | 4.800 | 2400 | 50% |"), std::string::npos) << md;
  // A kernel name's '|' does not split its table cell.
  const std::string all = utilisation_markdown(utilisation(p, h200, 0, 10));
  EXPECT_NE(all.find("`cutlass_gemm\\|tn`"), std::string::npos) << all;
  EXPECT_EQ(utilisation(p, h200, 0, 0).top.size(), 0u);
  EXPECT_NE(md.find("a step 10.000 ms of wall time (200.0 samples/s): kernels 8.000 ms, host / launch gaps 2.000 ms"),
            std::string::npos)
      << md;
}

TEST(Utilisation, RecordsOfOneKernelAndOperatorAreOneRow) {
  EXPECT_EQ(short_kernel_name("void at::native::elementwise_kernel<128, 4, (anonymous)::F>(int, float*)"),
            "void at::native::elementwise_kernel<...>");
  EXPECT_EQ(short_kernel_name("sm90_xmma_fprop"), "sm90_xmma_fprop");
  KernelProfile p = step_profile();
  p.kernels.push_back(record("void relu_kernel<float, 4>(float*)", "aten::relu_", 100, 0, 1e8));
  p.kernels.push_back(record("void relu_kernel<c10::Half, 8>(c10::Half*)", "aten::relu_", 150, 0, 2e8));
  p.kernels.push_back(record("void relu_kernel<float, 4>(float*)", "aten::add_", 50, 0, 1e8));
  const Utilisation u = utilisation(p, nullptr, 0, 100);
  ASSERT_EQ(u.top.size(), 8u);  // six records, and relu_kernel twice: under relu_ and under add_
  const auto relu = std::find_if(u.top.begin(), u.top.end(), [](const UseRow& r) {
    return r.name == "void relu_kernel<...>" && r.op == "aten::relu_";
  });
  ASSERT_NE(relu, u.top.end());
  EXPECT_DOUBLE_EQ(relu->time_us, 250);
  EXPECT_DOUBLE_EQ(relu->bytes, 3e8);
}

TEST(Utilisation, WithoutAMeasuredRateTheOptionThenTheDatasheetPeakOfTheStepsArithmetic) {
  const KernelProfile p = step_profile();  // no gemm measured (a profile from before the measurement)
  const memory::CardSpec* h200 = shipped().find("h200_sxm");
  ASSERT_NE(h200, nullptr);
  GemmReference r = gemm_reference(p, h200, 790);
  EXPECT_DOUBLE_EQ(r.tflops, 790);
  EXPECT_EQ(r.source, "--gemm-tflops");
  r = gemm_reference(p, h200, 0);
  EXPECT_DOUBLE_EQ(r.tflops, h200->fp16_tensor_tflops.value());
  EXPECT_NE(r.source.find("datasheet fp16_tensor peak of h200_sxm"), std::string::npos) << r.source;
  // A card the table does not have: no reference, no share, no bandwidth column.
  const Utilisation u = utilisation(p, nullptr, 0, 5);
  EXPECT_DOUBLE_EQ(u.reference.tflops, 0);
  EXPECT_DOUBLE_EQ(u.share, 0);
  const std::string md = utilisation_markdown(u);
  EXPECT_EQ(md.find("% of the"), std::string::npos) << md;
  EXPECT_NE(md.find("% of bandwidth"), std::string::npos) << md;
}

class CardsUtilisation : public test::TempDirTest {};

TEST_F(CardsUtilisation, TheGemmRateRoundTripsAndOlderProfilesReadWithoutIt) {
  KernelProfile p = step_profile();
  p.gemm_tflops = 791.5;
  p.gemm_math = MathKind::kBf16Tensor;
  save_profile(dir() / "p.json", p);
  const KernelProfile q = load_profile(dir() / "p.json");
  EXPECT_DOUBLE_EQ(q.gemm_tflops, 791.5);
  EXPECT_EQ(q.gemm_math, MathKind::kBf16Tensor);

  json j = to_json(p);
  j.erase("gemm");
  EXPECT_DOUBLE_EQ(profile_from_json(j, "old.json").gemm_tflops, 0);
  j["gemm"] = {{"math", "fp8"}, {"tflops", 1}};
  try {
    profile_from_json(j, "bad.json");
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json: gemm"), std::string::npos) << e.what();
  }
}

TEST_F(CardsUtilisation, TheCommandPrintsEachProfileAndRefusesBadInput) {
  KernelProfile p = step_profile();
  save_profile(dir() / "a.json", p);
  p.batch = 4;
  p.gemm_tflops = 780;
  save_profile(dir() / "b.json", p);
  auto r = test::run_voxfit("cards utilisation --profile " + (dir() / "a.json").string() + " --profile " +
                            (dir() / "b.json").string() + " --top 2 --gemm-tflops 1000");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("## unetr fp16 training b2 on NVIDIA H200"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("50.0% of the --gemm-tflops (1000.0 TFLOP/s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("## unetr fp16 training b4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("64.1% of the measured fp16_tensor GEMM on this card (780.0 TFLOP/s)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("The 2 kernels with the most time"), std::string::npos) << r.out;

  r = test::run_voxfit("cards utilisation --profile " + (dir() / "none.json").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find((dir() / "none.json").string()), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  r = test::run_voxfit("cards utilisation");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--profile FILE.json is required"), std::string::npos) << r.err;
  r = test::run_voxfit("cards utilisation --profile " + (dir() / "a.json").string() + " --top -1");
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

// On a GPU: `cards profile` measures the card's GEMM rate beside the step, below the datasheet peak
// of its arithmetic and well above a tenth of it, and prints the step's share of it.
TEST_F(CardsUtilisation, ProfileMeasuresTheCardsGemmRateOnAGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA GPU";
  const fs::path out = dir() / "p.json";
  const auto r = test::run_voxfit(
      "cards profile --model unet3d --train --patch 64 --batch 1 --precision fp16 "
      "--warmup-steps 2 --timed-steps 2 --profiled-steps 1 --output " +
      out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("% of the measured fp16_tensor GEMM on this card"), std::string::npos) << r.out;
  const KernelProfile p = load_profile(out);
  EXPECT_EQ(p.gemm_math, MathKind::kFp16Tensor);
  const memory::CardSpec* card = p.card.empty() ? nullptr : shipped().find(p.card);
  if (!card) GTEST_SKIP() << p.device_name << " is not in the card table: measured " << p.gemm_tflops << " TFLOP/s";
  EXPECT_GT(p.gemm_tflops, 0.1 * card->fp16_tensor_tflops.value());
  EXPECT_LT(p.gemm_tflops, 1.02 * card->fp16_tensor_tflops.value());
}

}  // namespace
}  // namespace voxfit::cards
