#include "voxfit/cards/roofline.h"

#include <algorithm>
#include <cstdint>
#include <map>

#include "voxfit/core/error.h"

namespace voxfit::cards {

std::string to_string(ComputeUnit unit) {
  switch (unit) {
    case ComputeUnit::kFp16Tensor:
      return "fp16_tensor";
    case ComputeUnit::kBf16Tensor:
      return "bf16_tensor";
    case ComputeUnit::kTf32Tensor:
      return "tf32_tensor";
    case ComputeUnit::kFp32Vector:
      return "fp32_vector";
  }
  return "fp32_vector";
}

std::vector<EnergyPerFlop> default_energy_per_flop() {
  std::vector<EnergyPerFlop> out;
  // Volta and Turing have FP16 tensor cores only; Ampere, Ada and Hopper add BF16 (the FP16 rate)
  // and TF32 (half of it).
  out.push_back({"volta", ComputeUnit::kFp16Tensor, kVoltaTensorPicojoules});
  out.push_back({"turing", ComputeUnit::kFp16Tensor, kTuringTensorPicojoules});
  for (const auto& [architecture, picojoules] : {std::pair<const char*, double>{"ampere", kAmpereTensorPicojoules},
                                                 {"ada", kAdaTensorPicojoules},
                                                 {"hopper", kHopperTensorPicojoules}}) {
    out.push_back({architecture, ComputeUnit::kFp16Tensor, picojoules});
    out.push_back({architecture, ComputeUnit::kBf16Tensor, picojoules});
    out.push_back({architecture, ComputeUnit::kTf32Tensor, 2.0 * picojoules});
  }
  return out;
}

std::vector<std::pair<std::string, double>> free_parameters(const RooflineConstants& k) {
  std::vector<std::pair<std::string, double>> out = {{"memory_efficiency", k.memory_efficiency},
                                                     {"compute_efficiency", k.compute_efficiency},
                                                     {"kernel_latency_us", k.kernel_latency_us}};
  for (const auto& e : k.energy)
    out.emplace_back("energy_pj." + e.architecture + "." + to_string(e.unit), e.picojoules);
  return out;
}

ComputeUnit compute_unit(const memory::CardSpec& c, MathKind math) {
  switch (math) {
    case MathKind::kFp16Tensor:
      // Without FP16 tensor cores the libraries run a half product as FP32 arithmetic on FP16 storage:
      // PyTorch's cuDNN convolution descriptor takes CUDNN_DATA_FLOAT as the compute type of half
      // data (cuDNN's PSEUDO_HALF_CONFIG) and its cuBLAS half GEMMs compute in CUBLAS_COMPUTE_32F.
      // So the FP32 rate, never the FP16 vector rate (1/64 of it on Pascal GP102 / GP104).
      return c.fp16_tensor_tflops ? ComputeUnit::kFp16Tensor : ComputeUnit::kFp32Vector;
    case MathKind::kBf16Tensor:
      return c.bf16_tflops ? ComputeUnit::kBf16Tensor : ComputeUnit::kFp32Vector;
    case MathKind::kTf32:
      return c.tf32_tflops ? ComputeUnit::kTf32Tensor : ComputeUnit::kFp32Vector;
    case MathKind::kFp32:
      return ComputeUnit::kFp32Vector;
  }
  return ComputeUnit::kFp32Vector;
}

namespace {

double unit_tflops(const memory::CardSpec& c, ComputeUnit unit) {
  switch (unit) {
    case ComputeUnit::kFp16Tensor:
      return c.fp16_tensor_tflops.value_or(c.fp32_tflops);
    case ComputeUnit::kBf16Tensor:
      return c.bf16_tflops.value_or(c.fp32_tflops);
    case ComputeUnit::kTf32Tensor:
      return c.tf32_tflops.value_or(c.fp32_tflops);
    case ComputeUnit::kFp32Vector:
      return c.fp32_tflops;
  }
  return c.fp32_tflops;
}

}  // namespace

double peak_flops(const memory::CardSpec& c, MathKind math) { return unit_tflops(c, compute_unit(c, math)) * 1e12; }

double sustained_flops(const memory::CardSpec& c, MathKind math, const RooflineConstants& k) {
  const ComputeUnit unit = compute_unit(c, math);
  const double peak = unit_tflops(c, unit) * 1e12;
  if (c.architecture.empty() || c.tdp_w <= 0) return peak;
  for (const auto& e : k.energy) {
    if (e.architecture != c.architecture || e.unit != unit || e.picojoules <= 0) continue;
    const double powered = static_cast<double>(c.tdp_w) / (e.picojoules * 1e-12);
    const double base = c.base_mhz > 0 && c.boost_mhz > 0 ? peak * c.base_mhz / c.boost_mhz : 0.0;
    return std::min(peak, std::max(powered, base));
  }
  return peak;
}

double bandwidth_bytes(const memory::CardSpec& c) {
  return c.bandwidth_gbs * 1e9 * (c.inband_ecc ? kInbandEccDataShare : 1.0);
}

double roofline_seconds(double flops, double bytes, MathKind math, const memory::CardSpec& card,
                        const RooflineConstants& k) {
  const double compute = flops / (sustained_flops(card, math, k) * k.compute_efficiency);
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
  return kr.flops > 0 && kr.flops / (sustained_flops(card, kr.math, k) * k.compute_efficiency) >
                             kr.bytes / (bandwidth_bytes(card) * k.memory_efficiency);
}

// The time of `time_us` (no fixed latency part) on the target, split by what bounds it there.
KernelTime scale_time(const KernelRecord& kr, double time_us, const memory::CardSpec& source,
                      const memory::CardSpec& target, const RooflineConstants& k) {
  KernelTime t;
  if (time_us <= 0) return t;  // all of it was launch latency
  // Neither FLOPs nor bytes known (memsets, copies, layout changes): scaled by bandwidth.
  if (kr.flops <= 0 && kr.bytes <= 0) {
    t.memory_us = time_us * bandwidth_bytes(source) / bandwidth_bytes(target);
    return t;
  }
  const double src_us = roofline_seconds(kr.flops, kr.bytes, kr.math, source, k) * 1e6;
  const double dst_us = roofline_seconds(kr.flops, kr.bytes, kr.math, target, k) * 1e6;
  double& roof = compute_bound(kr, target, k) ? t.compute_us : t.memory_us;
  if (time_us >= src_us) {
    roof = dst_us;
    t.latency_us = (time_us - src_us) * issue_ratio(source, target);
    return t;
  }
  // Faster than the source's roofline: its bytes came from the source's L2, it moved them faster than
  // the assumed memory efficiency, or the byte estimate over-counts. A target with a smaller L2 that
  // cannot hold one launch's bytes gets its roofline (experiments/cards/results/h200/cards.md, rule 2).
  const double bytes_per_launch = kr.bytes / static_cast<double>(std::max<std::int64_t>(kr.calls, 1));
  if (target.l2_mb < source.l2_mb && bytes_per_launch > target.l2_mb * 1e6)
    roof = dst_us;
  else
    roof = src_us > 0 ? time_us * dst_us / src_us : dst_us;
  return t;
}

}  // namespace

KernelTime scale_kernel(const KernelRecord& kr, const memory::CardSpec& source, const memory::CardSpec& target,
                        const RooflineConstants& k) {
  const double latency = std::min(kr.time_us, k.kernel_latency_us * static_cast<double>(kr.calls));
  KernelTime t = scale_time(kr, kr.time_us - latency, source, target, k);
  t.latency_us += latency;
  return t;
}

double scale_kernel_us(const KernelRecord& kr, const memory::CardSpec& source, const memory::CardSpec& target,
                       const RooflineConstants& k) {
  return scale_kernel(kr, source, target, k).total_us();
}

CardPrediction predict_card(const KernelProfile& profile, const memory::CardSpec& source,
                            const memory::CardSpec& target, const RooflineConstants& k) {
  CardPrediction p;
  p.card = target.id;
  KernelTime sum;
  std::map<MathKind, double> flops_by_math;
  for (const auto& kr : profile.kernels) {
    flops_by_math[kr.math] += kr.flops;
    const KernelTime t = scale_kernel(kr, source, target, k);
    sum.compute_us += t.compute_us;
    sum.memory_us += t.memory_us;
    sum.latency_us += t.latency_us;
  }
  p.compute_s = sum.compute_us * 1e-6;
  p.memory_s = sum.memory_us * 1e-6;
  p.latency_s = sum.latency_us * 1e-6;
  p.kernel_s = sum.total_us() * 1e-6;
  p.overhead_s = profile.overhead_s_per_step();
  p.step_s = p.kernel_s + p.overhead_s;
  p.samples_per_s = p.step_s > 0 ? static_cast<double>(profile.batch) / p.step_s : 0.0;
  MathKind main = MathKind::kFp32;
  double most = 0;
  for (const auto& [math, flops] : flops_by_math)
    if (flops > most) {
      most = flops;
      main = math;
    }
  p.main_unit = compute_unit(target, main);
  p.main_unit_flops = sustained_flops(target, main, k);
  p.power_limited = p.main_unit_flops < peak_flops(target, main);
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
