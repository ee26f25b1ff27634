#include "voxfit/cards/roofline.h"

#include <algorithm>
#include <cstdint>

#include "voxfit/core/error.h"

namespace voxfit::cards {

double peak_flops(const memory::CardSpec& c, MathKind math) {
  double tflops = c.fp32_tflops;
  switch (math) {
    case MathKind::kFp16Tensor: tflops = c.fp16_tensor_tflops.value_or(c.fp32_tflops); break;
    case MathKind::kBf16Tensor: tflops = c.bf16_tflops.value_or(c.fp16_tensor_tflops.value_or(c.fp32_tflops)); break;
    case MathKind::kTf32: tflops = c.tf32_tflops.value_or(c.fp32_tflops); break;
    case MathKind::kFp32: tflops = c.fp32_tflops; break;
  }
  return tflops * 1e12;
}

double bandwidth_bytes(const memory::CardSpec& c) {
  return c.bandwidth_gbs * 1e9 * (c.inband_ecc ? kInbandEccDataShare : 1.0);
}

double roofline_seconds(double flops, double bytes, MathKind math, const memory::CardSpec& card,
                        const RooflineConstants& k) {
  const double compute = flops / (peak_flops(card, math) * k.compute_efficiency);
  const double memory = bytes / (bandwidth_bytes(card) * k.memory_efficiency);
  return std::max(compute, memory);
}

double issue_ratio(const memory::CardSpec& source, const memory::CardSpec& target) {
  const double s = static_cast<double>(source.sms) * source.boost_mhz;
  const double t = static_cast<double>(target.sms) * target.boost_mhz;
  return s > 0 && t > 0 ? s / t : 1.0;
}

namespace {

bool compute_bound(const KernelRecord& kr, const memory::CardSpec& card, const RooflineConstants& k) {
  return kr.flops / (peak_flops(card, kr.math) * k.compute_efficiency) >
         kr.bytes / (bandwidth_bytes(card) * k.memory_efficiency);
}

// The time of `time_us` (no latency part) on the target.
double scale_time_us(const KernelRecord& kr, double time_us, const memory::CardSpec& source,
                     const memory::CardSpec& target, const RooflineConstants& k) {
  if (time_us <= 0) return 0.0;  // all of it was launch latency
  // Neither FLOPs nor bytes known (memsets, copies outside an operator): scaled by bandwidth.
  if (kr.flops <= 0 && kr.bytes <= 0) return time_us * bandwidth_bytes(source) / bandwidth_bytes(target);
  const double src_us = roofline_seconds(kr.flops, kr.bytes, kr.math, source, k) * 1e6;
  const double dst_us = roofline_seconds(kr.flops, kr.bytes, kr.math, target, k) * 1e6;
  if (time_us >= src_us) return dst_us + (time_us - src_us) * issue_ratio(source, target);
  // Faster than the source's roofline: its bytes came from the source's L2, it moved them faster than
  // the assumed memory efficiency, or the byte estimate over-counts. A target with a smaller L2 that
  // cannot hold one launch's bytes gets its roofline (experiments/results/h200/cards.md, rule 2).
  const double bytes_per_launch = kr.bytes / static_cast<double>(std::max<std::int64_t>(kr.calls, 1));
  if (target.l2_mb < source.l2_mb && bytes_per_launch > target.l2_mb * 1e6) return dst_us;
  return src_us > 0 ? time_us * dst_us / src_us : dst_us;
}

}  // namespace

double scale_kernel_us(const KernelRecord& kr, const memory::CardSpec& source, const memory::CardSpec& target,
                       const RooflineConstants& k) {
  const double latency = std::min(kr.time_us, k.kernel_latency_us * static_cast<double>(kr.calls));
  return latency + scale_time_us(kr, kr.time_us - latency, source, target, k);
}

CardPrediction predict_card(const KernelProfile& profile, const memory::CardSpec& source,
                            const memory::CardSpec& target, const RooflineConstants& k) {
  CardPrediction p;
  p.card = target.id;
  double compute_us = 0, total_us = 0;
  for (const auto& kr : profile.kernels) {
    const double us = scale_kernel_us(kr, source, target, k);
    total_us += us;
    if (kr.flops > 0 && compute_bound(kr, target, k)) compute_us += us;
  }
  p.kernel_s = total_us * 1e-6;
  p.overhead_s = profile.overhead_s_per_step();
  p.step_s = p.kernel_s + p.overhead_s;
  p.samples_per_s = p.step_s > 0 ? static_cast<double>(profile.batch) / p.step_s : 0.0;
  p.compute_bound_share = total_us > 0 ? compute_us / total_us : 0.0;
  return p;
}

const memory::CardSpec& source_card(const KernelProfile& profile, const memory::CardTable& table) {
  if (!profile.card.empty())
    if (const auto* c = table.find(profile.card)) return *c;
  for (const auto& c : table.cards())
    if (c.name == profile.device_name) return c;
  throw IoError(table.source().string() + ": the profiled GPU '" + profile.device_name + "'" +
                (profile.card.empty() ? std::string() : " (card '" + profile.card + "')") +
                " is not in the card table; add its row to predict from its profile");
}

}  // namespace voxfit::cards
