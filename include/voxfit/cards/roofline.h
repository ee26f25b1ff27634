#pragma once
// Throughput on cards that are not here, from a kernel profile taken on one that is. A kernel's
// roofline time on a card is max(FLOPs / compute rate, bytes / bandwidth), with the rate of the unit
// its arithmetic runs on there (tensor cores for its type where the card has them, else the FP16 or
// FP32 vector units), power-limited where the card's TDP cannot feed that unit's peak, and the
// constants' efficiencies. Its measured
// time on the profiled card splits into that roofline time and the rest:
//   - the roofline part becomes the target's roofline time (absolute, not a ratio: a kernel that
//     reached a low fraction of the profiled card's peak is not assumed to stay that inefficient);
//   - the rest (measured minus roofline: launch latency, too few blocks to fill the SMs, tail waves,
//     synchronisation) is latency/occupancy bound and scales with SM count x boost clock, as
//     Habitat's wave scaling scales compute-side time (Yu et al., USENIX ATC 2021);
//   - a kernel that ran faster than the profiled card's DRAM roofline was served from its L2; on a
//     card whose L2 is smaller than the kernel's bytes per launch it gets the target's DRAM roofline,
//     on one where it still fits it keeps its measured/roofline ratio.
// The time the GPU did not spend in kernels (launches, host work) is kept as it is. Nothing depends
// on the card beyond the card table: the same constants serve every card.
#include <string>
#include <utility>
#include <vector>

#include "voxfit/cards/kernel_profile.h"
#include "voxfit/memory/card_table.h"

namespace voxfit::cards {

/// Share of a transfer that is data on a card with in-band ECC on (CardSpec::inband_ecc): GDDR6
/// cards without ECC pins keep one check byte per 16 data bytes in the DRAM itself, so they give up
/// 1/16 of their capacity (the A40's 45,416 CUDA-visible MiB of 48 GiB) and move 16 bytes for every
/// 15 bytes of data. A physical fraction, not a fitted one.
inline constexpr double kInbandEccDataShare = 15.0 / 16.0;

/// The unit a kernel's arithmetic runs on, on one card.
enum class ComputeUnit {
  kFp16Tensor,  ///< FP16 tensor cores, FP32 accumulate
  kBf16Tensor,  ///< BF16 tensor cores
  kTf32Tensor,  ///< TF32 tensor cores
  kFp32Vector,  ///< CUDA-core FP32 (and FP16 or BF16 products computed in FP32: pseudo-half)
};
std::string to_string(ComputeUnit unit);

/// One power constant: the board energy per floating-point operation of `unit` on cards of
/// `architecture` (card table column), in picojoules. A card whose TDP cannot feed its unit's peak
/// at that energy runs it at TDP / energy, never below its base clock's share of the peak.
struct EnergyPerFlop {
  std::string architecture;
  ComputeUnit unit = ComputeUnit::kFp16Tensor;
  double picojoules = 0;
};

/// The energy per dense tensor FLOP of each generation, one recipe from datasheets: the board power
/// (TDP) over the tensor rate at the base clock, the clock a card holds at its power limit under
/// load, of the generation's reference card. BF16 runs at the FP16 rate on the same units (the same
/// energy), TF32 at half of it (twice the energy per FLOP). A card whose TDP cannot feed its peak
/// at its generation's energy runs at TDP / energy, never below its own base clock's share.
///
/// Ampere: the A40 (the seeds' only power-limited card, GA102): 300 W over 149.7 x 1305 / 1740
/// TFLOP/s, 2.672 pJ. The seed numbers allow any FP16 value from 2.67 (the A40 at its base clock) to
/// 4.93 (where the 3090's 71 TFLOP/s would start to be limited); this is the smallest, which limits
/// no card more than its own datasheet base clock says.
inline constexpr double kAmpereTensorPicojoules = 300.0 / (149.7 * 1305.0 / 1740.0);
/// The generations without a seed card take the same recipe from their smallest-power data-centre
/// card, the one its TDP binds hardest (each card's row in data/cards.csv holds the columns):
/// Turing, the 70 W T4: 65 TFLOP/s FP16 at 1590 MHz boost, 585 MHz base, 2.927 pJ (NVIDIA's forum
/// measures 24 TFLOP/s in a long cuBLAS FP16 GEMM on a T4: its base-clock rate, 23.9, by power capping).
inline constexpr double kTuringTensorPicojoules = 70.0 / (65.0 * 585.0 / 1590.0);
/// Volta, the 250 W V100 PCIe: 112 TFLOP/s at 1380 MHz boost, 1245 MHz base, 2.474 pJ.
inline constexpr double kVoltaTensorPicojoules = 250.0 / (112.0 * 1245.0 / 1380.0);
/// Ada, the 72 W L4: 121 TFLOP/s dense FP16 at 2040 MHz boost, 795 MHz base, 1.527 pJ.
inline constexpr double kAdaTensorPicojoules = 72.0 / (121.0 * 795.0 / 2040.0);
/// Hopper, the 350 W H100 PCIe: 756.5 TFLOP/s dense FP16 at 1755 MHz boost, 1125 MHz base,
/// 0.722 pJ (the 700 W SXM cards then run at 970 of 989 TFLOP/s).
inline constexpr double kHopperTensorPicojoules = 350.0 / (756.5 * 1125.0 / 1755.0);
std::vector<EnergyPerFlop> default_energy_per_flop();

/// The model's constants, the same for every card.
struct RooflineConstants {
  /// Fraction of the datasheet bandwidth a memory-bound kernel's estimated bytes move at: a plain
  /// copy's, 4.3 of 4.8 TB/s measured on the H200 (../shared/reference/README.md). Kernels that are
  /// slower on the profiled card (batch norm, pooling) carry the rest as latency-bound time.
  double memory_efficiency = 0.9;
  /// Fraction of the unit's sustained rate a large matrix product reaches (H200: about 790 of 989
  /// TFLOP/s measured).
  double compute_efficiency = 0.8;
  /// Part of every kernel's time that is launch latency and tail, not scaled by any card (microseconds).
  double kernel_latency_us = 0.0;
  /// Power constants per architecture generation and unit (default_energy_per_flop()).
  std::vector<EnergyPerFlop> energy = default_energy_per_flop();
};

/// The model's free parameters with their values, by name: the constants above and nothing else
/// ("energy_pj.ampere.fp16_tensor", ...). Everything else a prediction uses is the profile and the
/// two cards' rows.
std::vector<std::pair<std::string, double>> free_parameters(const RooflineConstants& constants);

/// The unit `math` runs on on `card`: its tensor cores for that type where it has them; otherwise
/// FP32 (a float16 product as FP32 arithmetic on FP16 storage, as cuDNN's pseudo-half
/// configuration and cuBLAS's 32F compute type run it; no BF16 / TF32 arithmetic before Ampere).
ComputeUnit compute_unit(const memory::CardSpec& card, MathKind math);
/// The datasheet peak of that unit in FLOP/s.
double peak_flops(const memory::CardSpec& card, MathKind math);
/// The rate the card sustains on that unit (FLOP/s): min(peak, max(TDP / energy, peak x base /
/// boost)) where the constants have an energy for the card's architecture and unit, else the peak.
double sustained_flops(const memory::CardSpec& card, MathKind math, const RooflineConstants& constants);
/// Bandwidth available to data in bytes/s: the datasheet figure, times kInbandEccDataShare where
/// the card keeps its ECC in-band.
double bandwidth_bytes(const memory::CardSpec& card);

/// The ideal time of `flops` and `bytes` on `card` (seconds): the roofline with the sustained rate
/// and the constants' efficiencies.
double roofline_seconds(double flops, double bytes, MathKind math, const memory::CardSpec& card,
                        const RooflineConstants& constants);

/// SM count x boost clock of `source` over that of `target`: how much longer latency/occupancy-bound
/// time takes on the target (1 when either card lacks SMs or clock).
double issue_ratio(const memory::CardSpec& source, const memory::CardSpec& target);

/// One kernel record's time per step on `target` (microseconds), from its time on `source`:
/// roofline(target) + (measured - roofline(source)) x issue_ratio, or, for a kernel faster than the
/// source's roofline, roofline(target) when its bytes per launch exceed the target's L2 and
/// measured x roofline(target) / roofline(source) when they fit.
double scale_kernel_us(const KernelRecord& kernel, const memory::CardSpec& source, const memory::CardSpec& target,
                       const RooflineConstants& constants);

/// scale_kernel_us's time split by what bounds it on the target (microseconds per step).
struct KernelTime {
  double compute_us = 0;  ///< roofline time of a kernel above the target's ridge point
  double memory_us = 0;   ///< roofline time below the ridge, and copies scaled by bandwidth
  double latency_us = 0;  ///< beyond the source's roofline (scaled by SMs x clock) and the fixed latency
  double total_us() const { return compute_us + memory_us + latency_us; }
};
KernelTime scale_kernel(const KernelRecord& kernel, const memory::CardSpec& source, const memory::CardSpec& target,
                        const RooflineConstants& constants);

struct CardPrediction {
  std::string card;       ///< card id
  double kernel_s = 0;    ///< summed kernel time per step
  double overhead_s = 0;  ///< kept from the profile
  double step_s = 0;      ///< kernel_s + overhead_s
  double samples_per_s = 0;
  double compute_s = 0;  ///< kernel time bound by the arithmetic rate
  double memory_s = 0;   ///< kernel time bound by bandwidth
  double latency_s = 0;  ///< kernel time bound by latency / occupancy (SMs x clock)
  /// The unit the profile's main arithmetic (its math kind with the most FLOPs) runs on, its
  /// sustained rate on this card (FLOP/s) and whether that is below the unit's peak (power limit).
  ComputeUnit main_unit = ComputeUnit::kFp32Vector;
  double main_unit_flops = 0;
  bool power_limited = false;
  /// Shares of the step: compute, memory, and latency including the launch and host time kept.
  double compute_share() const { return step_s > 0 ? compute_s / step_s : 0.0; }
  double memory_share() const { return step_s > 0 ? memory_s / step_s : 0.0; }
  double latency_share() const { return step_s > 0 ? (latency_s + overhead_s) / step_s : 0.0; }
};

/// Predicts one card. `source` is the profiled card's row.
CardPrediction predict_card(const KernelProfile& profile, const memory::CardSpec& source,
                            const memory::CardSpec& target, const RooflineConstants& constants);

/// The profiled GPU's row: the profile's card id, else the card whose CUDA name is the profile's
/// device name. IoError naming the table when it is not there.
const memory::CardSpec& source_card(const KernelProfile& profile, const memory::CardTable& table);

}  // namespace voxfit::cards
