// The scaling arithmetic of `voxfit cards predict` on a synthetic profile and made-up cards whose
// numbers make the expected times easy to compute by hand.
#include <gtest/gtest.h>

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
  EXPECT_DOUBLE_EQ(peak_flops(kB, MathKind::kTf32), 10e12);         // no TF32: FP32
  EXPECT_DOUBLE_EQ(peak_flops(kB, MathKind::kBf16Tensor), 25e12);   // no BF16 entry: FP16 tensor
  EXPECT_DOUBLE_EQ(bandwidth_bytes(kA), 500e9);
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
  EXPECT_NEAR(a.compute_bound_share, 30.0 / 60.0, 1e-12);
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

}  // namespace
}  // namespace voxfit::cards
