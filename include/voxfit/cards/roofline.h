#pragma once
// Throughput on cards that are not here, from a kernel profile taken on one that is. A kernel's
// roofline time on a card is max(FLOPs / compute peak, bytes / bandwidth), with the peak that matches
// its arithmetic (FP16 tensor, BF16 tensor, TF32, FP32) and the constants' efficiencies. Its measured
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
#include <vector>

#include "voxfit/cards/kernel_profile.h"
#include "voxfit/memory/card_table.h"

namespace voxfit::cards {

/// Share of a transfer that is data on a card with in-band ECC on (CardSpec::inband_ecc): GDDR6
/// cards without ECC pins keep one check byte per 16 data bytes in the DRAM itself, so they give up
/// 1/16 of their capacity (the A40's 45,416 CUDA-visible MiB of 48 GiB) and move 16 bytes for every
/// 15 bytes of data. A physical fraction, not a fitted one.
inline constexpr double kInbandEccDataShare = 15.0 / 16.0;

/// The model's constants, the same for every card.
struct RooflineConstants {
  /// Fraction of the datasheet bandwidth a framework kernel's estimated bytes move at. A plain copy
  /// reaches about 0.9 (H200: 4.3 of 4.8 TB/s measured); batch norm, pooling, broadcast and
  /// strided element-wise kernels and the operand re-reads of convolutions on a small-L2 card do
  /// not, and the published RTX 3090 / A40 numbers put the average at about 0.6. The one constant
  /// calibrated against published numbers (both cards, both models, both precisions together).
  double memory_efficiency = 0.6;
  /// Fraction of the datasheet tensor / FP32 peak a large matrix product reaches (H200: about 790
  /// of 989 TFLOP/s measured).
  double compute_efficiency = 0.8;
  /// Part of every kernel's time that is launch latency and tail, not scaled by any card (microseconds).
  double kernel_latency_us = 0.0;
};

/// The card's peak rate for `math` in FLOP/s: FP16 tensor (FP32 accumulate), BF16 tensor, TF32
/// or FP32; a card without that unit falls back (BF16 -> FP16 tensor -> FP32, TF32 -> FP32).
double peak_flops(const memory::CardSpec& card, MathKind math);
/// Bandwidth available to data in bytes/s: the datasheet figure, times kInbandEccDataShare where
/// the card keeps its ECC in-band.
double bandwidth_bytes(const memory::CardSpec& card);

/// The ideal time of `flops` and `bytes` on `card` (seconds): the roofline with the constants' efficiencies.
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

struct CardPrediction {
  std::string card;         ///< card id
  double kernel_s = 0;      ///< summed kernel time per step
  double overhead_s = 0;    ///< kept from the profile
  double step_s = 0;        ///< kernel_s + overhead_s
  double samples_per_s = 0;
  double compute_bound_share = 0;  ///< share of kernel time in kernels above the card's ridge point
};

/// Predicts one card. `source` is the profiled card's row.
CardPrediction predict_card(const KernelProfile& profile, const memory::CardSpec& source,
                            const memory::CardSpec& target, const RooflineConstants& constants);

/// The profiled GPU's row: the profile's card id, else the card whose CUDA name is the profile's
/// device name. IoError naming the table when it is not there.
const memory::CardSpec& source_card(const KernelProfile& profile, const memory::CardTable& table);

}  // namespace voxfit::cards
