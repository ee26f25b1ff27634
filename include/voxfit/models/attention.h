#pragma once
// The one attention function behind every transformer block (ViT, UNETR, Swin), so a run can
// switch between the explicit matmul-softmax and LibTorch's fused kernel with `--attention`.
#include <torch/types.h>

#include "voxfit/models/network.h"

namespace voxfit::models {

/// `auto` becomes `sdpa` where LibTorch has the public fused kernel (2.x), `math` on 1.13.
AttentionMode resolve_attention(AttentionMode mode);

/// softmax(q k^T / sqrt(D) + bias + mask) v.
/// q: [B, X..., L, D]; k, v: [B, X..., S, D] (X: heads, or windows and heads). `bias` and `mask`
/// are optional additive terms (undefined = none) broadcastable to [B, X..., L, S]; keeping them
/// apart lets the math path add them one after the other, as MONAI's Swin does.
/// The sdpa path folds X into one head dimension and passes bias + mask as one float mask that
/// broadcasts over the batch, so the mask is stored once, not once per sample.
torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& bias, const torch::Tensor& mask, AttentionMode mode);

}  // namespace voxfit::models
