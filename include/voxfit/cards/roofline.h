#pragma once
// Throughput on cards that are not here, from a kernel profile taken on one that is. Each kernel's
// measured time is scaled by the ratio of its roofline time on the target to its roofline time on
// the profiled card: max(FLOPs / compute peak, bytes / bandwidth), with the peak that matches its
// arithmetic (FP16 tensor, BF16 tensor, TF32, FP32). A kernel below a card's ridge point thus scales
// with bandwidth, one above it with compute, and one that crosses the ridge between the cards with
// both (the roofline form of Habitat's scaling, Yu et al., USENIX ATC 2021). The time the GPU did
// not spend in kernels (launches, host work) is kept as it is. Nothing depends on the card beyond
// the card table: the same constants serve every card.
#include <string>
#include <vector>

#include "voxfit/cards/kernel_profile.h"
#include "voxfit/memory/card_table.h"

namespace voxfit::cards {

/// The model's constants, the same for every card.
struct RooflineConstants {
  /// Fraction of the datasheet bandwidth a streaming kernel reaches (H200: about 4.3 of 4.8 TB/s measured).
  double memory_efficiency = 0.9;
  /// Fraction of the datasheet tensor / FP32 peak a large matrix product reaches (H200: about 790 of 989 TFLOP/s).
  double compute_efficiency = 0.8;
  /// Part of every kernel's time that is launch latency and tail, not scaled by any card (microseconds).
  double kernel_latency_us = 0.0;
};

/// The card's peak rate for `math` in FLOP/s: FP16 tensor (FP32 accumulate), BF16 tensor, TF32
/// or FP32; a card without that unit falls back (BF16 -> FP16 tensor -> FP32, TF32 -> FP32).
double peak_flops(const memory::CardSpec& card, MathKind math);
/// Bandwidth in bytes/s.
double bandwidth_bytes(const memory::CardSpec& card);

/// The ideal time of `flops` and `bytes` on `card` (seconds): the roofline with the constants' efficiencies.
double roofline_seconds(double flops, double bytes, MathKind math, const memory::CardSpec& card,
                        const RooflineConstants& constants);

/// One kernel record's time per step on `target` (microseconds), scaled from its time on `source`.
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
