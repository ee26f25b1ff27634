#pragma once
// The launchers of voxfit's fused DiceCE loss kernels (dice_ce.cu): plain pointers and sizes, as
// instance_norm_launch.h; dice_ce_cuda.cpp turns tensors into these calls.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "instance_norm_launch.h"  // DType

namespace voxfit::kernels::cuda {

/// Logits [B, K, S] (S: the spatial voxels of a sample) in NCDHW (K planes of S) or channels-last
/// (S rows of K) memory; the target is [B, S] int64 class indices.
struct LossShape {
  int64_t b = 0, k = 0, s = 0;
  bool channels_last = false;
};

/// The most classes the kernels take (registers per voxel); more go through ATen.
inline constexpr int64_t kMaxLossClasses = 32;

/// Blocks per sample the launchers use: the rows of `partial` per sample.
int dice_ce_chunks(const LossShape& shape);

/// Per sample b and block j of its voxels, 3K + 1 float sums in partial[(b * chunks + j) * (3K + 1)]:
/// for each class k the soft intersection sum(p_k [t = k]), the predicted sum sum(p_k) and the
/// label count sum([t = k]); then sum(-log p_t). p = softmax over the classes in float32. A label
/// outside [0, K) counts for no class and adds no cross-entropy.
void dice_ce_stats(DType dtype, const LossShape& shape, const void* logits, const int64_t* target, float* partial,
                   cudaStream_t stream);

/// The gradient of the loss at the logits, in the logits' dtype and layout: with coef[b * (2K + 1)]
/// = {a_0..a_K-1, c_0..c_K-1, e} for sample b (the loss's derivative at p_k is a_k [t = k] + c_k,
/// at z_t through the cross-entropy e (p - onehot(t))):
/// grad_j = p_j (g_j - sum_k p_k g_k) + e (p_j - [t = j]), g_k = a_k [t = k] + c_k.
void dice_ce_backward(DType dtype, const LossShape& shape, const void* logits, const int64_t* target,
                      const float* coef, void* grad, cudaStream_t stream);

}  // namespace voxfit::kernels::cuda
