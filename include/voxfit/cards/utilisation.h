#pragma once
// How close a profiled step comes to the card's limits: the FLOPs the profiler counted over the
// step's wall time against the card's measured dense GEMM rate (the most a matrix product reaches
// there), and, kernel by kernel, achieved FLOP/s and DRAM traffic against the card's bandwidth.
// The FLOPs are the operators' (Kineto's count: convolutions, matrix products, attention; elementwise
// ops count their own small arithmetic), so the step's rate is useful work per second, the same
// whichever kernels ran it.
#include <string>
#include <vector>

#include "voxfit/cards/kernel_profile.h"
#include "voxfit/memory/card_table.h"

namespace voxfit::cards {

/// The rate the step is held against, and where it came from.
struct GemmReference {
  double tflops = 0;   ///< 0: unknown (no share is given)
  std::string source;  ///< "measured fp16 GEMM on this card", "--gemm-tflops", "datasheet fp16_tensor peak"
};

/// The reference for `profile`: its measured GEMM rate where `cards profile` took one, else
/// `override_tflops` (> 0), else the datasheet peak of the profiled card's unit for the profile's
/// tensor arithmetic (`card`, may be null: then none).
GemmReference gemm_reference(const KernelProfile& profile, const memory::CardSpec* card, double override_tflops);

/// What a group of kernels (an operator class, or one kernel record) did in a step.
struct UseRow {
  std::string name;    ///< class ("convolution", ...) or kernel name
  std::string op;      ///< the operator (kernel rows), "" for classes
  double time_us = 0;  ///< per step
  double flops = 0;    ///< per step
  double bytes = 0;    ///< estimated DRAM bytes per step
  double tflops() const { return time_us > 0 ? flops / (time_us * 1e6) : 0.0; }
  double gb_per_s() const { return time_us > 0 ? bytes / (time_us * 1e3) : 0.0; }
};

struct Utilisation {
  std::string label;        ///< the profile's label
  std::string device_name;  ///< the profiled GPU
  double wall_s = 0;        ///< a step's wall time
  double samples_per_s = 0;
  double kernel_s = 0;  ///< its kernels' summed time
  double flops = 0;     ///< counted FLOPs of a step
  double tflops = 0;    ///< flops / wall_s / 1e12
  GemmReference reference;
  double share = 0;             ///< tflops / reference (0 without a reference)
  double bandwidth_gbs = 0;     ///< the profiled card's datasheet bandwidth (0: card not in the table)
  std::vector<UseRow> classes;  ///< by operator class, most time first
  /// The kernels with the most time, most first: records of one kernel (short_kernel_name) and
  /// operator together.
  std::vector<UseRow> top;
  std::string settings;  ///< "CUDA graph, channels-last, LibTorch 2.11.0": how the step ran
};

/// A kernel's name without its argument list and template arguments, as tables show it:
/// "void at::native::elementwise_kernel<128, 4, ...>(int, ...)" -> "void at::native::elementwise_kernel<...>".
std::string short_kernel_name(const std::string& name);

/// The operator class a kernel record belongs to: "convolution", "matrix product", "attention",
/// "normalisation", "optimiser", "loss", "copy / layout" or "elementwise / other".
std::string operator_class(const KernelRecord& kernel);

/// `top_kernels` (>= 0) records in `top`. `card` is the profiled card's row (may be null).
Utilisation utilisation(const KernelProfile& profile, const memory::CardSpec* card, double override_tflops,
                        int top_kernels);

/// The Markdown `voxfit cards utilisation` prints for one profile.
std::string utilisation_markdown(const Utilisation& u);
/// One line: "0.88 TFLOP counted a step: 21.9 TFLOP/s, 2.8% of the measured fp16 GEMM (790.1 TFLOP/s)".
std::string utilisation_line(const Utilisation& u);

}  // namespace voxfit::cards
