// Fused DiceCE loss (nnU-Net's DC_and_CE: cross-entropy + soft Dice on softmax), forward sums and
// backward, on logits of float, half or bfloat16 in NCDHW or channels-last memory.
//
// Why: the ATen loss runs a dozen element-wise passes over float32 copies of the logits and keeps
// the float32 softmax and log-softmax and a one-hot target for backward, whose own temporaries come
// on top: at UNETR's largest batch under 24 GiB (36, 14 classes, 96^3) 2.87 GiB kept and most of the
// 4.81 GiB "workspace" at the backward peak. Here one pass over the logits gives the per-class sums
// the loss needs (the loss itself follows from B x (3K + 1) numbers), and one pass in backward
// recomputes the softmax and writes the gradient: nothing is kept but the logits and the target,
// which exist anyway.
//
// Each voxel is one thread's: its K logits (K <= 32) sit in registers. A block covers a chunk of one
// sample's voxels; its sums go to a partial row that ATen adds up in a fixed order (no atomics: the
// same input gives the same bits).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "device_common.cuh"
#include "dice_ce_launch.h"

namespace voxfit::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Where voxel v of sample b keeps its class-0 logit, and the distance between its classes.
struct Voxel {
  int64_t base, step;
};

__device__ __forceinline__ Voxel voxel_of(const LossShape& s, int64_t b, int64_t v) {
  return s.channels_last ? Voxel{(b * s.s + v) * s.k, 1} : Voxel{b * s.k * s.s + v, s.s};
}

// p = softmax of the voxel's logits (float32); returns log(sum exp(z - max)) + max, so that
// -log p_t = lse - z_t; xt receives z_t (0 for a label outside [0, K)).
template <typename T, int MAXK>
__device__ __forceinline__ float softmax_of(const T* logits, const Voxel& vx, int k, int64_t t, float (&p)[MAXK],
                                            float& xt) {
  float m = -INFINITY;
  xt = 0.f;
#pragma unroll
  for (int j = 0; j < MAXK; ++j) {
    if (j < k) {
      p[j] = load(logits, vx.base + j * vx.step);
      if (j == t) xt = p[j];
      m = fmaxf(m, p[j]);
    }
  }
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < MAXK; ++j) {
    if (j < k) {
      p[j] = expf(p[j] - m);
      sum += p[j];
    }
  }
  const float inv = 1.f / sum;
#pragma unroll
  for (int j = 0; j < MAXK; ++j)
    if (j < k) p[j] *= inv;
  return m + logf(sum);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

template <typename T, int MAXK>
__global__ void __launch_bounds__(kThreads) stats_kernel(LossShape s, int64_t chunk, const T* logits,
                                                         const int64_t* target, float* partial) {
  const int k = static_cast<int>(s.k);
  const int64_t b = blockIdx.y;
  const int64_t v0 = blockIdx.x * chunk, v1 = min(s.s, v0 + chunk);
  float inter[MAXK], psum[MAXK], count[MAXK], ce = 0.f;
#pragma unroll
  for (int j = 0; j < MAXK; ++j) inter[j] = psum[j] = count[j] = 0.f;
  for (int64_t v = v0 + threadIdx.x; v < v1; v += kThreads) {
    const int64_t t = target[b * s.s + v];
    float p[MAXK], xt;
    const float lse = softmax_of<T, MAXK>(logits, voxel_of(s, b, v), k, t, p, xt);
#pragma unroll
    for (int j = 0; j < MAXK; ++j) {
      if (j < k) {
        psum[j] += p[j];
        if (j == t) {
          inter[j] += p[j];
          count[j] += 1.f;
        }
      }
    }
    if (t >= 0 && t < k) ce += lse - xt;
  }
  // The block's 3K + 1 sums: each warp's, then the warps' in order.
  __shared__ float sh[kWarps][3 * MAXK + 1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < MAXK; ++j) {
    if (j < k) {
      const float a = warp_sum(inter[j]), p = warp_sum(psum[j]), c = warp_sum(count[j]);
      if (lane == 0) {
        sh[warp][j] = a;
        sh[warp][k + j] = p;
        sh[warp][2 * k + j] = c;
      }
    }
  }
  const float total_ce = warp_sum(ce);
  if (lane == 0) sh[warp][3 * k] = total_ce;
  __syncthreads();
  const int row = 3 * k + 1;
  for (int i = threadIdx.x; i < row; i += kThreads) {
    float v = 0.f;
    for (int w = 0; w < kWarps; ++w) v += sh[w][i];
    partial[(b * gridDim.x + blockIdx.x) * row + i] = v;
  }
}

template <typename T, int MAXK>
__global__ void __launch_bounds__(kThreads) backward_kernel(LossShape s, int64_t chunk, const T* logits,
                                                            const int64_t* target, const float* coef, T* grad) {
  const int k = static_cast<int>(s.k);
  const int64_t b = blockIdx.y;
  __shared__ float a[MAXK], c[MAXK], e;
  const float* row = coef + b * (2 * k + 1);
  if (threadIdx.x < k) {
    a[threadIdx.x] = row[threadIdx.x];
    c[threadIdx.x] = row[k + threadIdx.x];
  }
  if (threadIdx.x == 0) e = row[2 * k];
  __syncthreads();
  const int64_t v0 = blockIdx.x * chunk, v1 = min(s.s, v0 + chunk);
  for (int64_t v = v0 + threadIdx.x; v < v1; v += kThreads) {
    const int64_t t = target[b * s.s + v];
    const Voxel vx = voxel_of(s, b, v);
    float p[MAXK], xt;
    softmax_of<T, MAXK>(logits, vx, k, t, p, xt);
    float dot = 0.f;  // sum_k p_k g_k
#pragma unroll
    for (int j = 0; j < MAXK; ++j)
      if (j < k) dot += p[j] * (c[j] + (j == t ? a[j] : 0.f));
#pragma unroll
    for (int j = 0; j < MAXK; ++j) {
      if (j < k) {
        const float hit = j == t ? 1.f : 0.f;
        const float g = c[j] + hit * a[j];
        store(grad, vx.base + j * vx.step, p[j] * (g - dot) + e * (p[j] - hit));
      }
    }
  }
}

// One launch over a grid of (chunks of a sample's voxels) x (samples).
template <typename T, int MAXK>
void launch(const LossShape& s, const void* logits, const int64_t* target, float* partial, const float* coef,
            void* grad, cudaStream_t stream) {
  const int chunks = dice_ce_chunks(s);
  const int64_t chunk = (s.s + chunks - 1) / chunks;  // voxels a block covers
  const dim3 blocks(static_cast<unsigned>(chunks), static_cast<unsigned>(s.b));
  const T* x = static_cast<const T*>(logits);
  if (partial) stats_kernel<T, MAXK><<<blocks, kThreads, 0, stream>>>(s, chunk, x, target, partial);
  if (grad) backward_kernel<T, MAXK><<<blocks, kThreads, 0, stream>>>(s, chunk, x, target, coef, static_cast<T*>(grad));
}

// The smallest register block that holds K classes.
template <typename T>
void launch_for_classes(const LossShape& s, const void* logits, const int64_t* target, float* partial,
                        const float* coef, void* grad, cudaStream_t stream) {
  if (s.k <= 4) return launch<T, 4>(s, logits, target, partial, coef, grad, stream);
  if (s.k <= 8) return launch<T, 8>(s, logits, target, partial, coef, grad, stream);
  if (s.k <= 16) return launch<T, 16>(s, logits, target, partial, coef, grad, stream);
  return launch<T, 32>(s, logits, target, partial, coef, grad, stream);
}

void dispatch(DType dtype, const LossShape& s, const void* logits, const int64_t* target, float* partial,
              const float* coef, void* grad, cudaStream_t stream) {
  switch (dtype) {
    case DType::kFloat:
      return launch_for_classes<float>(s, logits, target, partial, coef, grad, stream);
    case DType::kHalf:
      return launch_for_classes<__half>(s, logits, target, partial, coef, grad, stream);
    case DType::kBFloat16:
      return launch_for_classes<__nv_bfloat16>(s, logits, target, partial, coef, grad, stream);
  }
}

}  // namespace

// About eight resident blocks per SM over the batch, at least four voxels a thread.
int dice_ce_chunks(const LossShape& s) {
  const int64_t target = (int64_t{8} * sm_count() + s.b - 1) / std::max<int64_t>(1, s.b);
  const int64_t most = std::max<int64_t>(1, s.s / (int64_t{4} * kThreads));
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({target, most, 65535})));
}

void dice_ce_stats(DType dtype, const LossShape& shape, const void* logits, const int64_t* target, float* partial,
                   cudaStream_t stream) {
  dispatch(dtype, shape, logits, target, partial, nullptr, nullptr, stream);
}

void dice_ce_backward(DType dtype, const LossShape& shape, const void* logits, const int64_t* target,
                      const float* coef, void* grad, cudaStream_t stream) {
  dispatch(dtype, shape, logits, target, nullptr, coef, grad, stream);
}

}  // namespace voxfit::kernels::cuda
