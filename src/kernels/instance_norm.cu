// Fused instance norm + affine + activation (+ residual add before the activation), forward and
// backward, for NCDHW and channels-last (NDHWC) tensors of float, half or bfloat16 with fp32
// statistics.
//
// Why: ATen runs instance norm as batch norm over a [1, N*C, S] view, one thread block per
// channel: a UNETR decoder at batch 2 has 32 such planes of 884,736 voxels, so 32 blocks on a
// 132-SM H200, and its batch-norm kernels took 51% of the training step's kernel time
// (experiments/results/h200/performance.md). Here every instance is split over enough blocks to
// fill the GPU, and the activation and residual add ride along for free.
//
// Each pass is one launch over the same grid: x = the instances (NCDHW: one plane; channels-last:
// one sample and a tile of up to 32 threads' channels), y = chunks of the spatial rows (batch norm
// in NCDHW: chunks of each sample's plane of the channel, NormShape::samples). A block's partial
// sums go to a workspace and a finalize launch adds them in a fixed order (no atomics: the same
// input at the same 16-byte alignment gives the same bits). A thread loads 16 bytes at once where
// the shape and every pointer allow (vector_width; performance-notes 43): consecutive rows of an
// NCDHW plane, or consecutive channels of a channels-last row. Statistics use sums shifted by the
// instance's first element, so a large mean relative to the spread costs no precision.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "device_common.cuh"
#include "instance_norm_kernels.cuh"
#include "instance_norm_launch.h"

namespace voxfit::kernels::cuda {

namespace {

// 16-byte units (Pack in instance_norm_kernels.cuh) where every pointer starts on one and the
// tensor is made of them: NCDHW planes of a multiple of 16 bytes, or channels-last rows of a
// multiple of 16 bytes of channels; else one element at a time.
template <typename T>
int vector_width(const NormShape& s, std::initializer_list<const void*> pointers) {
  constexpr int kWidth = 16 / sizeof(T);
  if ((s.channels_last ? s.c : s.s) % kWidth != 0) return 1;
  for (const void* q : pointers)
    if (q != nullptr && reinterpret_cast<std::uintptr_t>(q) % 16 != 0) return 1;
  return kWidth;
}

// Calls f with the kernels' unit (std::integral_constant V) and layout of units (kChannels).
template <typename T, typename F>
void with_units(const NormShape& s, std::initializer_list<const void*> pointers, F&& f) {
  constexpr int kWidth = 16 / sizeof(T);
  if (vector_width<T>(s, pointers) == 1)
    f(std::integral_constant<int, 1>{}, std::false_type{});
  else if (s.channels_last)
    f(std::integral_constant<int, kWidth>{}, std::true_type{});
  else
    f(std::integral_constant<int, kWidth>{}, std::false_type{});
}

template <typename T>
void forward_typed(const NormShape& s, const void* x, const float* w, const float* b, const void* r, ActSpec act,
                   float eps, void* y, float* mean, float* rstd, float* ws, cudaStream_t stream) {
  const T *xt = static_cast<const T*>(x), *rt = static_cast<const T*>(r);
  T* yt = static_cast<T*>(y);
  with_units<T>(s, {x, r, y}, [&](auto v, auto channels) {
    constexpr int V = decltype(v)::value;
    constexpr bool kChannels = decltype(channels)::value;
    const Tiling t = tiling(s, sm_count(), kChannels ? V : 1);
    const dim3 grid(static_cast<unsigned>(t.tiles), static_cast<unsigned>(t.chunks));
    forward_stats<T, V, kChannels><<<grid, kThreads, 0, stream>>>(s, t.tc, t.rows, t.chunk_rows, xt, ws);
    const int64_t planes = s.n * s.c;
    forward_finalize<T>
        <<<static_cast<unsigned>((planes + 255) / 256), 256, 0, stream>>>(s, t.chunks, xt, ws, eps, mean, rstd);
    forward_apply<T, V, kChannels>
        <<<grid, kThreads, 0, stream>>>(s, t.tc, t.rows, t.chunk_rows, xt, w, b, rt, act, mean, rstd, yt);
  });
}

template <typename T>
void backward_typed(const NormShape& s, const void* dy, const void* y, const void* x, const void* r, const float* mean,
                    const float* rstd, const float* w, ActSpec act, void* dx, void* dz, float* sum_dz,
                    float* sum_dz_xhat, float* ws, cudaStream_t stream) {
  const T *dyt = static_cast<const T*>(dy), *yt = static_cast<const T*>(y), *xt = static_cast<const T*>(x),
          *rt = static_cast<const T*>(r);
  T *dxt = static_cast<T*>(dx), *dzt = static_cast<T*>(dz);
  with_units<T>(s, {dy, y, x, r, dx, dz}, [&](auto v, auto channels) {
    constexpr int V = decltype(v)::value;
    constexpr bool kChannels = decltype(channels)::value;
    const Tiling t = tiling(s, sm_count(), kChannels ? V : 1);
    const dim3 grid(static_cast<unsigned>(t.tiles), static_cast<unsigned>(t.chunks));
    backward_reduce<T, V, kChannels>
        <<<grid, kThreads, 0, stream>>>(s, t.tc, t.rows, t.chunk_rows, dyt, yt, xt, rt, mean, rstd, act, ws);
    const int64_t planes = s.n * s.c;
    backward_finalize<<<static_cast<unsigned>((planes + 255) / 256), 256, 0, stream>>>(planes, t.chunks, ws, sum_dz,
                                                                                       sum_dz_xhat);
    backward_apply<T, V, kChannels><<<grid, kThreads, 0, stream>>>(s, t.tc, t.rows, t.chunk_rows, dyt, yt, xt, rt, mean,
                                                                   rstd, w, act, sum_dz, sum_dz_xhat, dxt, dzt);
  });
}

}  // namespace

int64_t workspace_floats(const NormShape& shape) {
  // Enough for either tiling the launch may pick (channels-last units of 4 or 8 channels, or one).
  int chunks = 0;
  for (const int width : {1, 4, 8}) chunks = std::max(chunks, tiling(shape, sm_count(), width).chunks);
  return shape.n * shape.c * chunks * 2;
}

void instance_norm_act_forward(DType dtype, const NormShape& shape, const void* x, const float* weight,
                               const float* bias, const void* residual, ActSpec act, float eps, void* y, float* mean,
                               float* rstd, float* workspace, cudaStream_t stream) {
  switch (dtype) {
    case DType::kFloat:
      return forward_typed<float>(shape, x, weight, bias, residual, act, eps, y, mean, rstd, workspace, stream);
    case DType::kHalf:
      return forward_typed<__half>(shape, x, weight, bias, residual, act, eps, y, mean, rstd, workspace, stream);
    case DType::kBFloat16:
      return forward_typed<__nv_bfloat16>(shape, x, weight, bias, residual, act, eps, y, mean, rstd, workspace, stream);
  }
}

void instance_norm_act_backward(DType dtype, const NormShape& shape, const void* dy, const void* y, const void* x,
                                const void* residual, const float* mean, const float* rstd, const float* weight,
                                ActSpec act, void* dx, void* dz, float* sum_dz, float* sum_dz_xhat, float* workspace,
                                cudaStream_t stream) {
  switch (dtype) {
    case DType::kFloat:
      return backward_typed<float>(shape, dy, y, x, residual, mean, rstd, weight, act, dx, dz, sum_dz, sum_dz_xhat,
                                   workspace, stream);
    case DType::kHalf:
      return backward_typed<__half>(shape, dy, y, x, residual, mean, rstd, weight, act, dx, dz, sum_dz, sum_dz_xhat,
                                    workspace, stream);
    case DType::kBFloat16:
      return backward_typed<__nv_bfloat16>(shape, dy, y, x, residual, mean, rstd, weight, act, dx, dz, sum_dz,
                                           sum_dz_xhat, workspace, stream);
  }
}

}  // namespace voxfit::kernels::cuda
