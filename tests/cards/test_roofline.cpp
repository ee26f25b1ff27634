// The scaling arithmetic of `voxfit cards predict` on a synthetic profile and made-up cards whose
// numbers make the expected times easy to compute by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "support/test_support.h"
#include "voxfit/bench/reference_table.h"
#include "voxfit/cards/prediction_report.h"
#include "voxfit/cards/roofline.h"
#include "voxfit/core/error.h"

namespace voxfit::cards {
namespace {

memory::CardSpec card(const std::string& id, double bandwidth_gbs, double fp16_tflops, double fp32_tflops,
                      std::optional<double> tf32_tflops, int sms = 100, int boost_mhz = 1000, double l2_mb = 50) {
  memory::CardSpec c;
  c.id = id;
  c.name = "Card " + id;
  c.bandwidth_gbs = bandwidth_gbs;
  c.fp16_tensor_tflops = fp16_tflops;
  c.fp32_tflops = fp32_tflops;
  c.tf32_tflops = tf32_tflops;
  c.sms = sms;
  c.boost_mhz = boost_mhz;
  c.l2_mb = l2_mb;
  return c;
}

// Source: 1000 GB/s, 100 FP16 tensor TFLOP/s (ridge 100 FLOP/B), 100 SMs at 1000 MHz, 50 MB L2.
// A: half the bandwidth, same compute, half the SMs (latency-bound time x2), 5 MB L2.
// B: same bandwidth, a quarter of the compute, the same SMs, clock and L2.
// A2: A with a 20 MB L2.
const memory::CardSpec kSource = card("src", 1000, 100, 10, 20);
const memory::CardSpec kA = card("a", 500, 100, 10, 20, 50, 1000, 5);
const memory::CardSpec kB = card("b", 1000, 25, 10, std::nullopt);
const memory::CardSpec kA2 = card("a2", 500, 100, 10, 20, 50, 1000, 20);

RooflineConstants exact() {
  RooflineConstants k;
  k.memory_efficiency = 1.0;
  k.compute_efficiency = 1.0;
  k.kernel_latency_us = 0.0;
  return k;
}

KernelRecord kernel(double time_us, double flops, double bytes, MathKind math = MathKind::kFp16Tensor) {
  KernelRecord k;
  k.name = "k";
  k.kind = "kernel";
  k.math = math;
  k.calls = 10;
  k.time_us = time_us;
  k.flops = flops;
  k.bytes = bytes;
  return k;
}

TEST(Roofline, PeakRatesFollowTheArithmeticAndFallBack) {
  EXPECT_DOUBLE_EQ(peak_flops(kSource, MathKind::kFp16Tensor), 100e12);
  EXPECT_DOUBLE_EQ(peak_flops(kSource, MathKind::kTf32), 20e12);
  EXPECT_DOUBLE_EQ(peak_flops(kSource, MathKind::kFp32), 10e12);
  EXPECT_DOUBLE_EQ(peak_flops(kB, MathKind::kTf32), 10e12);  // no TF32: FP32
  // No BF16 tensor cores: FP16 tensor cores cannot run bfloat16, so it is emulated in FP32.
  EXPECT_DOUBLE_EQ(peak_flops(kB, MathKind::kBf16Tensor), 10e12);
  EXPECT_EQ(compute_unit(kB, MathKind::kBf16Tensor), ComputeUnit::kFp32Vector);
  EXPECT_EQ(compute_unit(kSource, MathKind::kFp16Tensor), ComputeUnit::kFp16Tensor);
  EXPECT_DOUBLE_EQ(bandwidth_bytes(kA), 500e9);
}

// Without FP16 tensor cores a half product runs as FP32 arithmetic on FP16 storage (cuDNN's
// pseudo-half configuration, cuBLAS's 32F compute type): the FP32 rate, whatever the FP16 vector
// rate (1/64 of FP32 on Pascal GP102) or whether FP16 is emulated.
TEST(Roofline, Float16WithoutTensorCoresRunsAtTheFp32RateAsPseudoHalf) {
  memory::CardSpec pascal = card("pascal", 500, 0, 12, std::nullopt);
  pascal.fp16_tensor_tflops.reset();
  pascal.fp16_vector_tflops = 12.0 / 64;  // GP102: 1/64 of FP32
  EXPECT_EQ(compute_unit(pascal, MathKind::kFp16Tensor), ComputeUnit::kFp32Vector);
  EXPECT_DOUBLE_EQ(peak_flops(pascal, MathKind::kFp16Tensor), 12e12);
  EXPECT_DOUBLE_EQ(peak_flops(pascal, MathKind::kFp32), 12e12);
  memory::CardSpec emulated = pascal;
  emulated.fp16_vector_tflops.reset();
  emulated.fp16_emulated = true;
  EXPECT_EQ(compute_unit(emulated, MathKind::kFp16Tensor), ComputeUnit::kFp32Vector);
  EXPECT_DOUBLE_EQ(peak_flops(emulated, MathKind::kFp16Tensor), 12e12);
  // A card with FP16 tensor cores keeps them whatever its vector rate.
  memory::CardSpec tensor = kSource;
  tensor.fp16_vector_tflops = 20;
  EXPECT_DOUBLE_EQ(peak_flops(tensor, MathKind::kFp16Tensor), 100e12);
}

TEST(Roofline, PascalFloat16GemmBoundProfilePredictsAboutItsFp32Time) {
  // The same matrix products (1e12 FLOPs a step, 500 FLOP/B in float32) profiled in both precisions
  // on the source (roofline 12.5 ms on its FP16 tensor cores, 125 ms on FP32), 0.5 ms kept.
  KernelProfile half;
  half.batch = 64;
  half.kernels = {kernel(14000, 1e12, 1e9, MathKind::kFp16Tensor)};
  half.wall_s_per_step = 0.0145;
  KernelProfile single = half;
  single.kernels = {kernel(130000, 1e12, 2e9, MathKind::kFp32)};
  single.wall_s_per_step = 0.1305;
  memory::CardSpec pascal = card("pascal", 500, 0, 12, std::nullopt, 30, 1582, 3);
  pascal.fp16_tensor_tflops.reset();
  pascal.fp16_vector_tflops = 12.0 / 64;
  const RooflineConstants k;
  const double half_s = predict_card(half, kSource, pascal, k).samples_per_s;
  const double single_s = predict_card(single, kSource, pascal, k).samples_per_s;
  // Compute-bound on FP32 arithmetic both ways: within a small factor, not 1/64 of the rate.
  EXPECT_GT(half_s, 0.5 * single_s);
  EXPECT_LT(half_s, 2.0 * single_s);
  // With FP16 tensor cores the same profiles predict float16 faster.
  const memory::CardSpec volta = card("volta", 500, 60, 12, std::nullopt, 30, 1582, 3);
  EXPECT_GT(predict_card(half, kSource, volta, k).samples_per_s, predict_card(single, kSource, volta, k).samples_per_s);
}

TEST(Roofline, PowerLimitIsTdpOverEnergyPerFlopNeverBelowTheBaseClock) {
  memory::CardSpec c = card("c", 500, 100, 10, 20);  // 100 TFLOP/s FP16 tensor at 1000 MHz boost
  c.architecture = "gen";
  c.tdp_w = 100;
  c.base_mhz = 400;
  RooflineConstants k = exact();
  k.energy = {{"gen", ComputeUnit::kFp16Tensor, 2.0}};  // 100 W / 2 pJ = 50 TFLOP/s
  EXPECT_NEAR(sustained_flops(c, MathKind::kFp16Tensor, k), 50e12, 1e3);
  c.base_mhz = 600;  // the base clock holds 60 TFLOP/s
  EXPECT_NEAR(sustained_flops(c, MathKind::kFp16Tensor, k), 60e12, 1e3);
  c.tdp_w = 400;  // enough power for the peak
  EXPECT_NEAR(sustained_flops(c, MathKind::kFp16Tensor, k), 100e12, 1e3);
  c.tdp_w = 100;
  EXPECT_NEAR(sustained_flops(c, MathKind::kTf32, k), 20e12, 1e3);  // no TF32 energy: its peak
  c.architecture = "other";                                         // no energy for this generation
  EXPECT_NEAR(sustained_flops(c, MathKind::kFp16Tensor, k), 100e12, 1e3);
  c.architecture = "gen";
  // A compute-bound kernel (1e12 FLOPs: 10 ms roofline on the source, 10 ms more measured) takes
  // 1e12 / 60e12 s of roofline on the limited card; its latency part is unchanged.
  const KernelRecord g = kernel(20000, 1e12, 1e9);
  EXPECT_NEAR(scale_kernel_us(g, kSource, c, k), 1e12 / 60e12 * 1e6 + 10000, 1e-6);  // same SMs x clock
}

TEST(Roofline, IssueRatioIsSmsTimesClock) {
  EXPECT_DOUBLE_EQ(issue_ratio(kSource, kA), 2.0);
  EXPECT_DOUBLE_EQ(issue_ratio(kSource, kB), 1.0);
  EXPECT_DOUBLE_EQ(issue_ratio(kSource, card("fast", 1000, 100, 10, 20, 200, 1500)), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(issue_ratio(kSource, card("unknown", 1000, 100, 10, 20, 0, 0)), 1.0);  // no SMs/clock
}

TEST(Roofline, RooflinePartBecomesTheTargetsRooflineTheRestScalesWithSmsAndClock) {
  // 1e12 FLOPs, 1e9 bytes: 10 ms of compute (1 ms of memory) on the source; measured 20 ms, so
  // 10 ms roofline + 10 ms latency/occupancy-bound.
  const KernelRecord k = kernel(20000, 1e12, 1e9);
  EXPECT_NEAR(scale_kernel_us(k, kSource, kA, exact()), 10000 + 10000 * 2, 1e-6);  // A: half the SMs
  EXPECT_NEAR(scale_kernel_us(k, kSource, kB, exact()), 40000 + 10000, 1e-6);      // B: 40 ms of compute
  EXPECT_NEAR(scale_kernel_us(k, kSource, kSource, exact()), 20000, 1e-6);
  // Memory bound: 1e10 bytes, 10 ms on the source, measured 15 ms.
  const KernelRecord m = kernel(15000, 1e9, 1e10);
  EXPECT_NEAR(scale_kernel_us(m, kSource, kA, exact()), 20000 + 5000 * 2, 1e-6);
  EXPECT_NEAR(scale_kernel_us(m, kSource, kB, exact()), 10000 + 5000, 1e-6);
  // Nothing known: a copy, scaled by bandwidth.
  EXPECT_NEAR(scale_kernel_us(kernel(100, 0, 0), kSource, kA, exact()), 200, 1e-9);
}

TEST(Roofline, KernelOnTheRidgeTakesTheSlowerSideOfEachCard) {
  // 5e11 FLOPs and 5e9 bytes: 5 ms either way on the source, 1 ms more measured; A is
  // bandwidth-starved (10 ms), B compute-starved (20 ms).
  const KernelRecord k = kernel(6000, 5e11, 5e9);
  EXPECT_NEAR(scale_kernel_us(k, kSource, kA, exact()), 10000 + 1000 * 2, 1e-6);
  EXPECT_NEAR(scale_kernel_us(k, kSource, kB, exact()), 20000 + 1000, 1e-6);
}

TEST(Roofline, KernelFasterThanTheSourceRooflineMeetsDramWhereTheL2IsSmaller) {
  // 1e10 bytes in 5 ms: twice the source's DRAM roofline (10 ms), so it was served from L2.
  // 10 launches of 1 GB each: no 5 MB L2 holds them, so A gets its DRAM roofline (20 ms).
  const KernelRecord big = kernel(5000, 0, 1e10);
  EXPECT_NEAR(scale_kernel_us(big, kSource, kA, exact()), 20000, 1e-6);
  // B has the source's L2: the measured / roofline ratio is kept (10 ms of roofline -> 5 ms).
  EXPECT_NEAR(scale_kernel_us(big, kSource, kB, exact()), 5000, 1e-6);
  // 10 MB a launch (1e8 bytes, 100 us roofline, measured 50 us): fits A2's 20 MB L2, so the ratio
  // is kept (200 us roofline -> 100 us); A's 5 MB does not (200 us).
  const KernelRecord small = kernel(50, 0, 1e8);
  EXPECT_NEAR(scale_kernel_us(small, kSource, kA2, exact()), 100, 1e-9);
  EXPECT_NEAR(scale_kernel_us(small, kSource, kA, exact()), 200, 1e-9);
  // The source itself reproduces its own time.
  EXPECT_NEAR(scale_kernel_us(big, kSource, kSource, exact()), 5000, 1e-9);
}

TEST(Roofline, EfficienciesMoveTheRidgeTheSameWayOnEveryCard) {
  // At memory efficiency 0.5 the ridge kernel's source roofline is 10 ms of memory (5 ms of
  // compute), above its measured 6 ms: B (same L2) keeps the ratio, 6 x 20 / 10 = 12 ms; A (5 MB
  // L2, 500 MB a launch) gets its roofline, 5e9 / (500e9 x 0.5) = 20 ms.
  RooflineConstants k = exact();
  k.memory_efficiency = 0.5;
  EXPECT_NEAR(scale_kernel_us(kernel(6000, 5e11, 5e9), kSource, kB, k), 12000, 1e-6);
  EXPECT_NEAR(scale_kernel_us(kernel(6000, 5e11, 5e9), kSource, kA, k), 20000, 1e-6);
}

TEST(Roofline, LatencyPartIsKeptAndTheRestScaled) {
  RooflineConstants k = exact();
  k.kernel_latency_us = 100;  // 10 calls: 1000 us kept; of 14000 us, 10000 roofline (20000 on A), 4000 x2
  EXPECT_NEAR(scale_kernel_us(kernel(15000, 1e9, 1e10), kSource, kA, k), 1000 + 20000 + 4000 * 2, 1e-6);
  // A kernel shorter than its latency is kept as it is.
  EXPECT_NEAR(scale_kernel_us(kernel(500, 1e9, 1e10), kSource, kA, k), 500, 1e-9);
}

TEST(Roofline, PredictCardSumsKernelsAndKeepsTheOverhead) {
  KernelProfile p;
  p.batch = 8;
  p.kernels = {kernel(20000, 1e12, 1e9), kernel(15000, 1e9, 1e10)};
  p.wall_s_per_step = 0.035 + 0.005;  // 35 ms of kernels, 5 ms of launches and host work
  ASSERT_NEAR(p.overhead_s_per_step(), 0.005, 1e-12);
  const CardPrediction a = predict_card(p, kSource, kA, exact());
  EXPECT_EQ(a.card, "a");
  EXPECT_NEAR(a.kernel_s, 0.030 + 0.030, 1e-12);
  EXPECT_NEAR(a.step_s, 0.065, 1e-12);
  EXPECT_NEAR(a.samples_per_s, 8 / 0.065, 1e-9);
  // The first kernel: 10 ms compute-bound roofline + 20 ms latency; the second: 20 ms of memory +
  // 10 ms latency. Shares of the 65 ms step, latency with the 5 ms kept.
  EXPECT_NEAR(a.compute_s, 0.010, 1e-12);
  EXPECT_NEAR(a.memory_s, 0.020, 1e-12);
  EXPECT_NEAR(a.latency_s, 0.030, 1e-12);
  EXPECT_NEAR(a.compute_share() + a.memory_share() + a.latency_share(), 1.0, 1e-12);
  EXPECT_NEAR(a.latency_share(), 0.035 / 0.065, 1e-12);
  EXPECT_EQ(a.main_unit, ComputeUnit::kFp16Tensor);
  EXPECT_FALSE(a.power_limited);
  const CardPrediction b = predict_card(p, kSource, kB, exact());
  EXPECT_NEAR(b.step_s, 0.050 + 0.015 + 0.005, 1e-12);
  // The source itself reproduces the measured throughput.
  EXPECT_NEAR(predict_card(p, kSource, kSource, exact()).samples_per_s, p.samples_per_s(), 1e-9);
  // The overhead is never negative (a wall time below the kernel sum: overlapping streams).
  p.wall_s_per_step = 0.030;
  EXPECT_EQ(p.overhead_s_per_step(), 0.0);
}

TEST(Roofline, InbandEccGivesUpOneSixteenthOfTheBandwidthToCheckBits) {
  memory::CardSpec ecc = kA;  // 500 GB/s, half the SMs
  ecc.id = "a_ecc";
  ecc.inband_ecc = true;
  EXPECT_DOUBLE_EQ(bandwidth_bytes(ecc), 500e9 * 15.0 / 16.0);
  EXPECT_DOUBLE_EQ(bandwidth_bytes(kA), 500e9);
  // Memory bound (1e10 bytes, 10 ms on the source, measured 15 ms): the roofline part moves at
  // 468.75 GB/s, the 5 ms beyond the source's roofline still scales with SMs x clock only.
  const KernelRecord m = kernel(15000, 1e9, 1e10);
  EXPECT_NEAR(scale_kernel_us(m, kSource, ecc, exact()), 1e10 / (500e9 * 15 / 16) * 1e6 + 5000 * 2, 1e-6);
  // Compute bound (10 ms of FP16 tensor work, 1 ms of bytes even at 15/16): ECC changes nothing.
  const KernelRecord k = kernel(20000, 1e12, 1e9);
  EXPECT_NEAR(scale_kernel_us(k, kSource, ecc, exact()), scale_kernel_us(k, kSource, kA, exact()), 1e-9);
  // An ECC source: its roofline is longer, so less of the measured time counts as latency.
  memory::CardSpec src_ecc = kSource;
  src_ecc.inband_ecc = true;  // 937.5 GB/s: 1e10 bytes take 10.667 ms, measured 15 ms
  EXPECT_NEAR(scale_kernel_us(m, src_ecc, kA, exact()), 20000 + (15000 - 1e10 / 937.5e9 * 1e6) * 2, 1e-6);
  // A whole step on the ECC card is slower by exactly the memory part's 16/15.
  KernelProfile p;
  p.batch = 4;
  p.kernels = {kernel(10000, 0, 1e10)};  // at the source's roofline: no latency part
  p.wall_s_per_step = 0.010;
  EXPECT_NEAR(predict_card(p, kSource, ecc, exact()).step_s, predict_card(p, kSource, kA, exact()).step_s * 16 / 15,
              1e-12);
}

TEST(Roofline, SourceCardByIdThenByCudaNameElseError) {
  const memory::CardTable table({kSource, kA}, "cards.csv");
  KernelProfile p;
  p.card = "a";
  p.device_name = "Card src";
  EXPECT_EQ(source_card(p, table).id, "a");
  p.card = "";
  EXPECT_EQ(source_card(p, table).id, "src");
  p.device_name = "NVIDIA B200";
  try {
    source_card(p, table);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("cards.csv"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("NVIDIA B200"), std::string::npos) << e.what();
  }
}

// ---- The shipped card table and the committed H200 profiles ----

memory::CardTable shipped_cards() { return memory::load_card_table(test::source_dir() / "data" / "cards.csv"); }

// The reference models profiled on the H200 as the published cards ran them (NCHW, math
// attention): experiments/cards/results/h200/profiles-protocol.
std::vector<KernelProfile> protocol_profiles() {
  const auto dir = test::source_dir() / "experiments" / "cards" / "results" / "h200" / "profiles-protocol";
  std::vector<KernelProfile> out;
  for (const char* f : {"resnet50_float16.json", "resnet50_float32.json", "vit_base_patch16_224_float16.json",
                        "vit_base_patch16_224_float32.json"})
    out.push_back(load_profile(dir / f));
  return out;
}

// samples/s per profile (outer) and card (inner, table order).
std::vector<std::vector<double>> throughputs(const std::vector<KernelProfile>& profiles, const memory::CardTable& table,
                                             const RooflineConstants& k = {}) {
  std::vector<std::vector<double>> out;
  for (const auto& p : predict_all(profiles, table, k)) {
    out.emplace_back();
    for (const auto& c : p.cards) out.back().push_back(c.samples_per_s);
  }
  return out;
}

TEST(ShippedCards, EveryRowHasTheModelsColumnsAndASource) {
  const auto table = shipped_cards();
  const std::set<std::string> generations = {"pascal", "volta", "turing", "ampere", "ada", "hopper"};
  for (const auto& c : table.cards()) {
    EXPECT_EQ(generations.count(c.architecture), 1u) << c.id << ": " << c.architecture;
    EXPECT_GT(c.base_mhz, 0) << c.id;
    EXPECT_LE(c.base_mhz, c.boost_mhz) << c.id;
    EXPECT_FALSE(c.memory_type.empty()) << c.id;
    EXPECT_GT(c.tdp_w, 0) << c.id;
    ASSERT_TRUE(c.fp16_vector_tflops || c.fp16_emulated) << c.id;
    if (c.architecture == "pascal") {  // GP102: FP16 at 1/64 of FP32, no tensor cores
      EXPECT_FALSE(c.fp16_tensor_tflops) << c.id;
      EXPECT_NEAR(*c.fp16_vector_tflops, c.fp32_tflops / 64, 0.01) << c.id;
    }
  }
  // Each card's row ends with its quoted source note (commas inside).
  std::ifstream in(test::source_dir() / "data" / "cards.csv");
  std::string line;
  std::getline(in, line);
  EXPECT_NE(line.find(",source"), std::string::npos) << line;
  while (std::getline(in, line)) {
    ASSERT_FALSE(line.empty());
    EXPECT_EQ(line.back(), '"') << line;
    EXPECT_NE(line.find(",\""), std::string::npos) << line;
  }
}

class CardColumns : public test::TempDirTest {};

TEST_F(CardColumns, QuotedFieldsNewColumnsAndNoneLoadUnknownColumnsStayAllowed) {
  const auto path = dir() / "cards.csv";
  std::ofstream(path)
      << "id,name,memory_gb,cuda_visible_mib,bandwidth_gbs,sms,boost_mhz,base_mhz,fp32_tflops,fp16_vector_tflops,"
         "fp16_tensor_tflops,tf32_tflops,bf16_tflops,l2_mb,tdp_w,visible_source,architecture,memory_type,source,price\n"
         "old,\"Old, \"\"Maxwell\"\" card\",12,12000,336,24,1075,1000,6.1,none,,,,3,250,estimated,maxwell,GDDR5,"
         "\"datasheet, p. 2\",  \"1,000\"  \n"
         "p,Pascal,11,11172,484,28,1582,1481,11.3,0.177,,,,2.75,250,estimated,pascal,GDDR5X,,\n"
         "u,Unknown,11,11172,484,28,1582,,11.3,,,,,2.75,250,estimated,,,,\n";
  const auto table = memory::load_card_table(path);
  const auto& old = table.at("old");
  EXPECT_EQ(old.name, "Old, \"Maxwell\" card");
  EXPECT_TRUE(old.fp16_emulated);
  EXPECT_FALSE(old.fp16_vector_tflops);
  EXPECT_EQ(old.base_mhz, 1000);
  EXPECT_EQ(old.architecture, "maxwell");
  EXPECT_EQ(old.memory_type, "GDDR5");
  EXPECT_EQ(compute_unit(old, MathKind::kFp16Tensor), ComputeUnit::kFp32Vector);
  EXPECT_DOUBLE_EQ(table.at("p").fp16_vector_tflops.value(), 0.177);
  EXPECT_EQ(compute_unit(table.at("p"), MathKind::kFp16Tensor), ComputeUnit::kFp32Vector);  // pseudo-half
  const auto& u = table.at("u");  // optional columns left empty: unknown
  EXPECT_EQ(u.base_mhz, 0);
  EXPECT_FALSE(u.fp16_vector_tflops || u.fp16_emulated);
  EXPECT_TRUE(u.architecture.empty());
  EXPECT_EQ(compute_unit(u, MathKind::kFp16Tensor), ComputeUnit::kFp32Vector);

  const auto error_of = [&](const std::string& text) {
    std::ofstream(path) << text;
    try {
      memory::load_card_table(path);
    } catch (const IoError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string header =
      "id,name,memory_gb,cuda_visible_mib,bandwidth_gbs,sms,boost_mhz,fp32_tflops,fp16_tensor_tflops,tf32_tflops,"
      "bf16_tflops,l2_mb,tdp_w,visible_source,fp16_vector_tflops\n";
  std::string msg = error_of(header + "a,\"Card A,24,24000,900,80,1700,30,60,30,60,6,300,estimated,30\n");
  EXPECT_NE(msg.find("cards.csv:2: unterminated quoted field"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  msg = error_of(header + "a,\"Card\" A,24,24000,900,80,1700,30,60,30,60,6,300,estimated,30\n");
  EXPECT_NE(msg.find("cards.csv:2: text after the closing quote of field 2"), std::string::npos) << msg;
  msg = error_of(header + "a,Card A,24,24000,900,80,1700,30,60,30,60,6,300,estimated,half\n");
  EXPECT_NE(msg.find("cards.csv:2:15 (fp16_vector_tflops): 'half' is not a positive number or none"), std::string::npos)
      << msg;
}

// Without FP16 tensor cores float16 runs at the FP32 rate on half the bytes (pseudo-half): on the
// committed profiles within a small factor of float32 (measured here: 1.15x for ResNet50, 1.04x for
// ViT on the TITAN Xp), where the FP16 vector rate made it about 30x slower.
TEST(ShippedCards, WithoutFp16TensorCoresFloat16RunsNearItsFloat32RateOnTheCommittedProfiles) {
  const auto table = shipped_cards();
  const auto t = throughputs(protocol_profiles(), table);  // resnet16, resnet32, vit16, vit32
  int without = 0;
  for (std::size_t c = 0; c < table.cards().size(); ++c) {
    const auto& card = table.cards()[c];
    if (card.fp16_tensor_tflops) {
      EXPECT_GT(t[2][c], t[3][c]) << card.id << ": ViT float16 on FP16 tensor cores";
    } else {
      ++without;
      for (const int m : {0, 2}) {
        EXPECT_GT(t[m][c], 0.8 * t[m + 1][c]) << card.id << (m ? ": ViT" : ": resnet50");
        EXPECT_LT(t[m][c], 1.5 * t[m + 1][c]) << card.id << (m ? ": ViT" : ": resnet50");
      }
    }
  }
  EXPECT_GE(without, 2);  // TITAN Xp and GTX 1080 Ti
}

TEST(ShippedCards, ChangingOneCardsRowChangesOnlyThatCardsPredictions) {
  const auto table = shipped_cards();
  const auto profiles = protocol_profiles();
  const auto before = throughputs(profiles, table);
  const std::vector<std::function<void(memory::CardSpec&)>> edits = {
      [](memory::CardSpec& c) { c.bandwidth_gbs *= 0.8; },
      [](memory::CardSpec& c) { c.fp32_tflops *= 0.5; },
      [](memory::CardSpec& c) {
        if (c.fp16_tensor_tflops) *c.fp16_tensor_tflops *= 0.5;
        if (c.fp16_vector_tflops) *c.fp16_vector_tflops *= 0.5;
      },
      [](memory::CardSpec& c) { c.tdp_w /= 3; },
      [](memory::CardSpec& c) { c.sms /= 2; },
      [](memory::CardSpec& c) { c.l2_mb *= 0.5; },
      [](memory::CardSpec& c) { c.inband_ecc = !c.inband_ecc; },
  };
  for (std::size_t i = 0; i < table.cards().size(); ++i) {
    if (table.cards()[i].id == "h200_sxm") continue;  // the profiled card: every prediction starts from it
    bool own_changed = false;
    for (const auto& edit : edits) {
      auto cards = table.cards();
      edit(cards[i]);
      const auto after = throughputs(profiles, memory::CardTable(cards, table.source()));
      for (std::size_t p = 0; p < after.size(); ++p)
        for (std::size_t c = 0; c < after[p].size(); ++c) {
          if (c == i) {
            own_changed = own_changed || after[p][c] != before[p][c];
            continue;
          }
          ASSERT_EQ(after[p][c], before[p][c]) << "editing " << cards[i].id << " moved " << cards[c].id;
        }
    }
    EXPECT_TRUE(own_changed) << table.cards()[i].id;
  }
}

TEST(ShippedCards, TheSharedConstantsAreTheOnlyFreeParameters) {
  const RooflineConstants k;
  std::vector<std::string> names;
  for (const auto& [name, value] : free_parameters(k)) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "memory_efficiency", "compute_efficiency", "kernel_latency_us", "energy_pj.volta.fp16_tensor",
                       "energy_pj.turing.fp16_tensor", "energy_pj.ampere.fp16_tensor", "energy_pj.ampere.bf16_tensor",
                       "energy_pj.ampere.tf32_tensor", "energy_pj.ada.fp16_tensor", "energy_pj.ada.bf16_tensor",
                       "energy_pj.ada.tf32_tensor", "energy_pj.hopper.fp16_tensor", "energy_pj.hopper.bf16_tensor",
                       "energy_pj.hopper.tf32_tensor"}));
  // Their sources: the H200's measured copy (4.3 of 4.8 TB/s) and matmul (790 of 989 TFLOP/s)
  // ceilings, and the A40's datasheet (300 W at its 1305 of 1740 MHz base clock, 149.7 TFLOP/s).
  EXPECT_NEAR(k.memory_efficiency, 4.3 / 4.8, 0.01);
  EXPECT_NEAR(k.compute_efficiency, 790.0 / 989.4, 0.01);
  // Each generation's energy: its reference card's TDP over its FP16 tensor rate at the base clock
  // (the card's own row); BF16 the same, TF32 twice.
  const auto table = shipped_cards();
  const std::map<std::string, std::string> reference = {
      {"volta", "v100_pcie_16gb"}, {"turing", "t4"}, {"ampere", "a40"}, {"ada", "l4"}, {"hopper", "h100_pcie"}};
  for (const auto& e : k.energy) {
    const auto& c = table.at(reference.at(e.architecture));
    EXPECT_EQ(c.architecture, e.architecture);
    const double fp16_at_base = *c.fp16_tensor_tflops * c.base_mhz / c.boost_mhz;
    EXPECT_NEAR(e.picojoules, (e.unit == ComputeUnit::kTf32Tensor ? 2.0 : 1.0) * c.tdp_w / fp16_at_base, 1e-9)
        << e.architecture << " " << to_string(e.unit);
    // The reference card itself runs at its base clock: its TDP binds it hardest.
    EXPECT_NEAR(sustained_flops(c, MathKind::kFp16Tensor, k), fp16_at_base * 1e12, 1e3) << c.id;
  }

  // Every one of them is live: changing it moves some prediction of the reference profiles (and of
  // ViT float16 run as bfloat16, for the BF16 energy).
  auto profiles = protocol_profiles();
  KernelProfile bf16 = profiles[2];
  for (auto& kr : bf16.kernels)
    if (kr.math == MathKind::kFp16Tensor) kr.math = MathKind::kBf16Tensor;
  profiles.push_back(bf16);
  const auto base = throughputs(profiles, table, k);
  for (std::size_t i = 0; i < names.size(); ++i) {
    RooflineConstants changed = k;
    if (i == 0) changed.memory_efficiency *= 0.9;
    if (i == 1) changed.compute_efficiency *= 0.9;
    if (i == 2) changed.kernel_latency_us = 2;
    if (i >= 3) changed.energy[i - 3].picojoules *= 2;
    EXPECT_NE(throughputs(profiles, table, changed), base) << names[i];
  }
  // Nothing keys on a card's identity: renamed cards (ids and CUDA names) predict the same.
  auto renamed = table.cards();
  for (auto& c : renamed) {
    c.id = "x_" + c.id;
    c.name = "Renamed " + c.name;
  }
  auto moved = profiles;
  for (auto& p : moved) p.card = "x_" + p.card;
  EXPECT_EQ(throughputs(moved, memory::CardTable(renamed, table.source()), k), base);
  // FP32 arithmetic has no energy constant: it is never power-limited.
  for (const auto& c : table.cards())
    EXPECT_EQ(sustained_flops(c, MathKind::kFp32, k), peak_flops(c, MathKind::kFp32)) << c.id;
}

// Issue #51, rule 2: a card's power limit lowers its tensor rate whatever its generation. The 70 W T4
// holds its base-clock rate (23.9 of 65 TFLOP/s: NVIDIA's forum measures 24 in a long cuBLAS FP16
// GEMM); the same die at 250 W, the 2080 Ti, and the large cards of every generation keep (nearly)
// their peaks.
TEST(ShippedCards, APowerLimitLowersTheTensorRateInEveryGeneration) {
  const RooflineConstants k;
  const auto table = shipped_cards();
  const auto rate = [&](const std::string& id, MathKind m) { return sustained_flops(table.at(id), m, k) / 1e12; };
  EXPECT_NEAR(rate("t4", MathKind::kFp16Tensor), 65.0 * 585 / 1590, 1e-6);
  EXPECT_NEAR(rate("l4", MathKind::kBf16Tensor), 121.0 * 795 / 2040, 1e-6);
  EXPECT_NEAR(rate("l4", MathKind::kTf32), 60.0 * 795 / 2040, 0.3);  // twice the energy on half the rate
  EXPECT_NEAR(rate("h100_pcie", MathKind::kFp16Tensor), 756.5 * 1125 / 1755, 1e-6);
  EXPECT_NEAR(rate("v100_pcie_16gb", MathKind::kFp16Tensor), 112.0 * 1245 / 1380, 1e-6);
  EXPECT_DOUBLE_EQ(rate("rtx2080ti", MathKind::kFp16Tensor), 53.8);
  EXPECT_DOUBLE_EQ(rate("rtx4090", MathKind::kFp16Tensor), 165.2);
  EXPECT_GT(rate("h100_sxm", MathKind::kFp16Tensor), 0.97 * 989.4);
  EXPECT_GT(rate("v100_16gb", MathKind::kFp16Tensor), 0.96 * 125);
  // The rule, on one synthetic card of each generation: the same card at a quarter of the TDP that
  // feeds its peak runs below the peak, at TDP / energy or its base clock's share, whichever is more.
  for (const auto& e : k.energy) {
    if (e.unit != ComputeUnit::kFp16Tensor) continue;
    memory::CardSpec c = card("c_" + e.architecture, 500, 100, 10, 20);  // 100 TFLOP/s FP16 tensor
    c.architecture = e.architecture;
    c.base_mhz = 500;  // half the 1000 MHz boost
    c.tdp_w = static_cast<int>(100e12 * e.picojoules * 1e-12);
    EXPECT_NEAR(sustained_flops(c, MathKind::kFp16Tensor, k) / 1e12, std::max(c.tdp_w / e.picojoules, 50.0), 1e-6);
    const int full = c.tdp_w;
    c.tdp_w = full / 4;
    EXPECT_NEAR(sustained_flops(c, MathKind::kFp16Tensor, k) / 1e12, 50.0, 1e-6) << e.architecture;  // the base clock
    c.tdp_w = full * 3 / 4;
    EXPECT_LT(sustained_flops(c, MathKind::kFp16Tensor, k) / 1e12, 80.0) << e.architecture;
    EXPECT_GT(sustained_flops(c, MathKind::kFp16Tensor, k) / 1e12, 70.0) << e.architecture;
  }
  // A T4-bound GEMM profile: a compute-bound float16 step takes its base-clock time, 65 / 23.9 = 2.7x
  // its time at the datasheet peak.
  KernelProfile gemm;
  gemm.batch = 8;
  gemm.kernels = {kernel(125000, 1e13, 1e9, MathKind::kFp16Tensor)};  // on the source's roofline
  gemm.wall_s_per_step = 0.125;
  memory::CardSpec unlimited = table.at("t4");
  unlimited.tdp_w = 1000;
  const double ratio = predict_card(gemm, kSource, unlimited, k).samples_per_s /
                       predict_card(gemm, kSource, table.at("t4"), k).samples_per_s;
  EXPECT_GT(ratio, 2.0);
  EXPECT_LT(ratio, 65.0 / (65.0 * 585 / 1590) + 0.01);
}

TEST(ShippedCards, TheEightSeedNumbersWithin15PercentAndBothCrossoversRight) {
  const auto predictions = predict_all(protocol_profiles(), shipped_cards(), RooflineConstants{});
  const auto checks = check_reference(
      predictions, bench::load_reference_table(test::source_dir() / "data" / "reference" / "autodl_seed.csv"));
  ASSERT_EQ(checks.size(), 8u);
  std::map<std::string, double> predicted;  // "card model precision"
  for (const auto& c : checks) {
    EXPECT_LT(std::abs(c.error), 0.15) << c.reference.card << " " << c.reference.model << " " << c.reference.precision;
    predicted[c.reference.card + " " + c.reference.model + " " + c.reference.precision] = c.predicted;
  }
  // The published crossovers: the 3090 wins ResNet50 (bandwidth), the A40 wins ViT (tensor rate).
  for (const char* p : {"float16", "float32"}) {
    EXPECT_GT(predicted.at(std::string("rtx3090 resnet50 ") + p), predicted.at(std::string("a40 resnet50 ") + p)) << p;
    EXPECT_GT(predicted.at(std::string("a40 vit_base_patch16_224 ") + p),
              predicted.at(std::string("rtx3090 vit_base_patch16_224 ") + p))
        << p;
  }
}

}  // namespace
}  // namespace voxfit::cards
