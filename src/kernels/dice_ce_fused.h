#pragma once
// The CUDA side of kernels::dice_ce_fused (dice_ce_cuda.cpp): CUDA builds only.
#include <torch/types.h>

#include "voxfit/kernels/dice_ce.h"

namespace voxfit::kernels {

/// logits: CUDA, float / half / bfloat16, [B, K, spatial...] with 2 <= K <= 32, NCDHW-contiguous or
/// channels-last; target: on its device, [B, 1, spatial...], an integer type.
bool fused_dice_ce_supports(const torch::Tensor& logits, const torch::Tensor& target);

/// dice_ce_fused on the kernels. Requires fused_dice_ce_supports.
torch::Tensor dice_ce_on_kernels(const torch::Tensor& logits, const torch::Tensor& target, const DiceCeSpec& spec);

}  // namespace voxfit::kernels
