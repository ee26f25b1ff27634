#pragma once
// The activations a training forward saves for backward, predicted from the network's architecture,
// the input shape and the autocast dtype alone (nothing runs): per top-level block, under the same
// names the networks give their blocks (core::BlockScope), so that a prediction lines up with what
// the memory tracker measures around each block.
//
// What a block is charged, as the tracker measures it: the tensors it creates that are still live
// when it ends (saved for backward by some op, or returned), each counted once, in the block that
// created it. Its input belongs to the block before (or to the batch).
//
// The rules (one per op; `c` is the compute dtype: the autocast dtype, else float32):
// - convolution / transposed convolution / linear: saves its input and weight; its output is a new
//   `c` tensor. Under autocast the weight's `c` copy (autocast's cache) is saved too, and an input
//   of another dtype is cast to `c` first: a new tensor, saved.
// - instance norm (ATen: batch_norm over [1, B*C, ...]): saves its input, and per (sample, channel)
//   a float32 mean and inverse std; affine: the weight repeated per sample (float32; the repeated
//   bias is not saved); the output is a new tensor of the input's dtype (no autocast rule applies).
// - layer norm: autocast runs it in float32 (a half input is cast first, and the cast is what it
//   saves): saves its input and per row a float32 mean and rstd; output float32 (cast again to
//   `c` by the linear that reads it).
// - leaky ReLU / ReLU after a norm or residual add: in place, saves its output (no new tensor).
// - GELU: saves its input; output new (`c`).
// - add / cat / view / permute: save nothing; cat and add outputs are new tensors (a float32 and a
//   half operand make float32), a contiguous copy of a permuted tensor is a new tensor.
// - math attention: saves the scaled queries, the keys and values (views of the qkv output, which
//   therefore stays), the softmax output (float32 under autocast: softmax is on its float32 list)
//   and the output copy [B, L, C] the projection reads; Swin windows attend within n tokens, so
//   the softmax output is [windows, heads, n, n]. SDPA (LibTorch 2.x): q, k, v (views of the qkv
//   output, which stays), the output, its log-sum-exp, and an additive bias in `c` (Swin's relative
//   position bias plus the shift mask, one copy for all samples).
// - Swin: the shifted-window masks (float32 [windows, n, n]) are made by the first forward and
//   cached by the module; they are charged to swin_vit, as the tracker's largest step (the first)
//   sees them. The residual stream is in `c` (UNETR's is float32: its position embedding is).
// - checkpointed blocks keep only their outputs (the input is the block before's).
// Each network applies these rules to its own blocks (NetworkImpl::saved_activations, with the
// op rules of src/models/activation_rules.h), as nnU-Net's networks answer
// compute_conv_feature_map_size for themselves.
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "voxfit/models/activation_estimate.h"
#include "voxfit/models/network.h"

namespace voxfit::models {

/// The saved activations of a training forward of `net` (training mode, its own checkpointing) on
/// an input of `input_shape` ([B, C, D, H, W]) under autocast to `compute` (kFloat: no autocast),
/// as the network answers NetworkImpl::saved_activations, with each checkpointed block's
/// recomputation filled in. Throws UnsupportedError for networks without an analytic model (the
/// 2D classifiers, SwinUNETR-v2) and ModelError for an input the network does not accept.
ActivationEstimate estimate_activations(const NetworkImpl& net, const std::vector<std::int64_t>& input_shape,
                                        c10::ScalarType compute = c10::kFloat, const KernelPaths& paths = {});

}  // namespace voxfit::models
