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
// one sample and a tile of up to 32 channels), y = chunks of the spatial rows. A block's partial
// sums go to a workspace and a finalize launch adds them in a fixed order (no atomics: the same
// input gives the same bits). Statistics use sums shifted by the instance's first element, so a
// large mean relative to the spread costs no precision.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "device_common.cuh"
#include "instance_norm_launch.h"

namespace voxfit::kernels::cuda {

namespace {

constexpr int kThreads = 256;
// Rows a thread loads before it uses them: independent loads in flight per thread. One 2-byte load
// at a time leaves a few KB in flight per SM, a fraction of what HBM needs to stream (about 15 KB
// an SM on an H100 by Little's law); unrolled, the loads of kUnroll rows go out together.
constexpr int kUnroll = 4;

// Threads per block along the channels (channels-last) and along the rows.
struct Tiling {
  int tc = 1;         // channels a block covers (1 for NCDHW)
  int rows = 1;       // rows a block steps over at once
  int64_t tiles = 0;  // blocks along x: instances (NCDHW) or N * channel tiles (channels-last)
  int chunks = 1;     // blocks along y: pieces of the spatial rows
  int64_t chunk_rows = 0;
};

Tiling tiling(const NormShape& s) {
  Tiling t;
  if (s.channels_last) {
    t.tc = static_cast<int>(std::min<int64_t>(s.c, 32));
    t.rows = kThreads / t.tc;
    t.tiles = s.n * ((s.c + t.tc - 1) / t.tc);
  } else {
    t.tc = 1;
    t.rows = kThreads;
    t.tiles = s.n * s.c;
  }
  // About eight resident blocks per SM, but at least four rows per thread in each block.
  const int64_t target = int64_t{8} * sm_count();
  int64_t chunks = (target + t.tiles - 1) / t.tiles;
  chunks = std::min<int64_t>(chunks, std::max<int64_t>(1, s.s / (int64_t{4} * t.rows)));
  chunks = std::max<int64_t>(1, std::min<int64_t>(chunks, 65535));
  t.chunks = static_cast<int>(chunks);
  t.chunk_rows = (s.s + chunks - 1) / chunks;
  return t;
}

// Where a thread of a block works: the instance (plane = n * C + c), the first element's offset
// and the distance between consecutive rows.
struct Place {
  bool active = false;
  int64_t plane = 0, base = 0, stride = 1, c = 0;
  int ty = 0;
};

__device__ Place place(const NormShape& s, int tc, int rows) {
  Place p;
  const int tid = threadIdx.x;
  if (!s.channels_last) {
    p.active = true;
    p.plane = blockIdx.x;
    p.c = p.plane % s.c;
    p.base = p.plane * s.s;
    p.stride = 1;
    p.ty = tid;
    return p;
  }
  const int64_t tiles_c = (s.c + tc - 1) / tc;
  const int64_t n = blockIdx.x / tiles_c;
  p.c = (blockIdx.x % tiles_c) * tc + tid % tc;
  p.ty = tid / tc;
  p.active = p.ty < rows && p.c < s.c;
  p.plane = n * s.c + p.c;
  p.base = n * s.s * s.c + p.c;
  p.stride = s.c;
  return p;
}

__device__ __forceinline__ float activate(float z, const ActSpec& a) {
  if (a.act == Act::kReLU) return z > 0.f ? z : 0.f;
  if (a.act == Act::kLeakyReLU) return z > 0.f ? z : z * a.slope;
  return z;
}
// d act / d z, read off the output (the sign of y is the sign of z for all three).
__device__ __forceinline__ float activation_slope(float y, const ActSpec& a) {
  if (a.act == Act::kNone) return 1.f;
  if (y > 0.f) return 1.f;
  return a.act == Act::kLeakyReLU ? a.slope : 0.f;
}
// z from y for the invertible activations (none, LeakyReLU).
__device__ __forceinline__ float deactivate(float y, const ActSpec& a) {
  if (a.act == Act::kLeakyReLU && y <= 0.f) return y / a.slope;
  return y;
}

// Adds v0/v1 over the rows of the block (threads with the same channel lane) and writes the
// block's two sums of each instance to partial[(plane * chunks + chunk) * 2 + {0, 1}].
__device__ void block_partials(const Place& p, float v0, float v1, int tc, int rows, float* partial) {
  __shared__ float sh0[kThreads], sh1[kThreads];
  const int tid = threadIdx.x;
  sh0[tid] = v0;
  sh1[tid] = v1;
  __syncthreads();
  int span = 1;
  while (span < rows) span <<= 1;
  for (int off = span >> 1; off > 0; off >>= 1) {
    const int ty = tid / tc, lane = tid % tc;
    if (ty < off && ty + off < rows && ty < rows) {
      sh0[ty * tc + lane] += sh0[(ty + off) * tc + lane];
      sh1[ty * tc + lane] += sh1[(ty + off) * tc + lane];
    }
    __syncthreads();
  }
  if (p.active && p.ty == 0) {
    float* out = partial + (p.plane * gridDim.y + blockIdx.y) * 2;
    out[0] = sh0[tid];
    out[1] = sh1[tid];
  }
}

template <typename T>
__global__ void forward_stats(NormShape s, int tc, int rows, int64_t chunk_rows, const T* __restrict__ x,
                              float* __restrict__ partial) {
  const Place p = place(s, tc, rows);
  float s1 = 0.f, s2 = 0.f;
  if (p.active) {
    const float shift = load(x, p.base);
    const int64_t r0 = blockIdx.y * chunk_rows, r1 = min(s.s, r0 + chunk_rows);
    for (int64_t r = r0 + p.ty; r < r1; r += int64_t{rows} * kUnroll) {
      float v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t row = r + int64_t{u} * rows;
        v[u] = row < r1 ? load(x, p.base + row * p.stride) : shift;  // past the end: adds nothing
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float d = v[u] - shift;
        s1 += d;
        s2 += d * d;
      }
    }
  }
  block_partials(p, s1, s2, tc, rows, partial);
}

template <typename T>
__global__ void forward_finalize(NormShape s, int chunks, const T* x, const float* partial, float eps, float* mean,
                                 float* rstd) {
  const int64_t plane = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (plane >= s.n * s.c) return;
  double s1 = 0, s2 = 0;
  for (int k = 0; k < chunks; ++k) {
    s1 += partial[(plane * chunks + k) * 2];
    s2 += partial[(plane * chunks + k) * 2 + 1];
  }
  const int64_t n = plane / s.c, c = plane % s.c;
  const float shift = load(x, s.channels_last ? n * s.s * s.c + c : plane * s.s);
  const double m1 = s1 / s.s;
  const double var = fmax(0.0, s2 / s.s - m1 * m1);
  mean[plane] = static_cast<float>(shift + m1);
  rstd[plane] = static_cast<float>(1.0 / sqrt(var + eps));
}

template <typename T>
__global__ void forward_apply(NormShape s, int tc, int rows, int64_t chunk_rows, const T* __restrict__ x,
                              const float* __restrict__ weight, const float* __restrict__ bias,
                              const T* __restrict__ residual, ActSpec act, const float* __restrict__ mean,
                              const float* __restrict__ rstd, T* __restrict__ y) {
  const Place p = place(s, tc, rows);
  if (!p.active) return;
  const float w = weight ? weight[p.c] : 1.f, b = bias ? bias[p.c] : 0.f;
  const float scale = rstd[p.plane] * w, shift = b - mean[p.plane] * scale;
  const int64_t r0 = blockIdx.y * chunk_rows, r1 = min(s.s, r0 + chunk_rows);
  for (int64_t r = r0 + p.ty; r < r1; r += int64_t{rows} * kUnroll) {
    float xv[kUnroll], rv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t row = r + int64_t{u} * rows, i = p.base + row * p.stride;
      xv[u] = row < r1 ? load(x, i) : 0.f;
      rv[u] = row < r1 && residual ? load(residual, i) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t row = r + int64_t{u} * rows;
      if (row < r1) store(y, p.base + row * p.stride, activate(xv[u] * scale + shift + rv[u], act));
    }
  }
}

// What backward reads of element i: dy, y, and x (or else the residual added after the norm).
struct Loaded {
  float dy, y, x;
};

template <typename T>
__device__ __forceinline__ Loaded load_terms(int64_t i, const T* __restrict__ dy, const T* __restrict__ y,
                                             const T* __restrict__ x, const T* __restrict__ residual) {
  return {load(dy, i), load(y, i), x ? load(x, i) : residual ? load(residual, i) : 0.f};
}

// The kUnroll rows r, r + rows, ... of a thread (zeros past r1: they add nothing).
template <typename T>
__device__ __forceinline__ void load_rows(const Place& p, int64_t r, int64_t r1, int rows, const T* __restrict__ dy,
                                          const T* __restrict__ y, const T* __restrict__ x,
                                          const T* __restrict__ residual, Loaded (&v)[kUnroll]) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t row = r + int64_t{u} * rows;
    v[u] = row < r1 ? load_terms(p.base + row * p.stride, dy, y, x, residual) : Loaded{0.f, 0.f, 0.f};
  }
}

// dz and the normalised input: from x, or from y less the residual added after it.
__device__ __forceinline__ void backward_terms(const Loaded& v, bool has_x, float mean, float rstd,
                                               const ActSpec& act, float& dz, float& xhat) {
  dz = v.dy * activation_slope(v.y, act);
  xhat = has_x ? (v.x - mean) * rstd : deactivate(v.y, act) - v.x;
}

template <typename T>
__global__ void backward_reduce(NormShape s, int tc, int rows, int64_t chunk_rows, const T* __restrict__ dy,
                                const T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ residual,
                                const float* __restrict__ mean, const float* __restrict__ rstd, ActSpec act,
                                float* __restrict__ partial) {
  const Place p = place(s, tc, rows);
  float a = 0.f, b = 0.f;
  if (p.active) {
    const float m = x ? mean[p.plane] : 0.f, rs = rstd[p.plane];
    const int64_t r0 = blockIdx.y * chunk_rows, r1 = min(s.s, r0 + chunk_rows);
    for (int64_t r = r0 + p.ty; r < r1; r += int64_t{rows} * kUnroll) {
      Loaded v[kUnroll];
      load_rows(p, r, r1, rows, dy, y, x, residual, v);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float dz, xhat;
        backward_terms(v[u], x != nullptr, m, rs, act, dz, xhat);  // past the end dz = 0: adds nothing
        a += dz;
        b += dz * xhat;
      }
    }
  }
  block_partials(p, a, b, tc, rows, partial);
}

__global__ void backward_finalize(int64_t planes, int chunks, const float* partial, float* sum_dz, float* sum_dz_xhat) {
  const int64_t plane = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (plane >= planes) return;
  double a = 0, b = 0;
  for (int k = 0; k < chunks; ++k) {
    a += partial[(plane * chunks + k) * 2];
    b += partial[(plane * chunks + k) * 2 + 1];
  }
  sum_dz[plane] = static_cast<float>(a);
  sum_dz_xhat[plane] = static_cast<float>(b);
}

template <typename T>
__global__ void backward_apply(NormShape s, int tc, int rows, int64_t chunk_rows, const T* __restrict__ dy,
                               const T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ residual,
                               const float* __restrict__ mean, const float* __restrict__ rstd,
                               const float* __restrict__ weight, ActSpec act, const float* __restrict__ sum_dz,
                               const float* __restrict__ sum_dz_xhat, T* __restrict__ dx, T* __restrict__ dz_out) {
  const Place p = place(s, tc, rows);
  if (!p.active) return;
  const float m = x ? mean[p.plane] : 0.f, rs = rstd[p.plane];
  const float scale = rs * (weight ? weight[p.c] : 1.f);
  const float mean_dz = sum_dz[p.plane] / s.s, mean_dz_xhat = sum_dz_xhat[p.plane] / s.s;
  const int64_t r0 = blockIdx.y * chunk_rows, r1 = min(s.s, r0 + chunk_rows);
  for (int64_t r = r0 + p.ty; r < r1; r += int64_t{rows} * kUnroll) {
    Loaded v[kUnroll];
    load_rows(p, r, r1, rows, dy, y, x, residual, v);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t row = r + int64_t{u} * rows;
      if (row >= r1) continue;
      const int64_t i = p.base + row * p.stride;
      float dz, xhat;
      backward_terms(v[u], x != nullptr, m, rs, act, dz, xhat);
      store(dx, i, scale * (dz - mean_dz - xhat * mean_dz_xhat));
      if (dz_out) store(dz_out, i, dz);
    }
  }
}

template <typename T>
void forward_typed(const NormShape& s, const void* x, const float* w, const float* b, const void* r, ActSpec act,
                   float eps, void* y, float* mean, float* rstd, float* ws, cudaStream_t stream) {
  const Tiling t = tiling(s);
  const dim3 grid(static_cast<unsigned>(t.tiles), static_cast<unsigned>(t.chunks));
  const T* xt = static_cast<const T*>(x);
  forward_stats<T><<<grid, kThreads, 0, stream>>>(s, t.tc, t.rows, t.chunk_rows, xt, ws);
  const int64_t planes = s.n * s.c;
  forward_finalize<T>
      <<<static_cast<unsigned>((planes + 255) / 256), 256, 0, stream>>>(s, t.chunks, xt, ws, eps, mean, rstd);
  forward_apply<T><<<grid, kThreads, 0, stream>>>(s, t.tc, t.rows, t.chunk_rows, xt, w, b, static_cast<const T*>(r),
                                                  act, mean, rstd, static_cast<T*>(y));
}

template <typename T>
void backward_typed(const NormShape& s, const void* dy, const void* y, const void* x, const void* r,
                    const float* mean, const float* rstd, const float* w, ActSpec act, void* dx, void* dz,
                    float* sum_dz, float* sum_dz_xhat, float* ws, cudaStream_t stream) {
  const Tiling t = tiling(s);
  const dim3 grid(static_cast<unsigned>(t.tiles), static_cast<unsigned>(t.chunks));
  const T *dyt = static_cast<const T*>(dy), *yt = static_cast<const T*>(y), *xt = static_cast<const T*>(x),
          *rt = static_cast<const T*>(r);
  backward_reduce<T>
      <<<grid, kThreads, 0, stream>>>(s, t.tc, t.rows, t.chunk_rows, dyt, yt, xt, rt, mean, rstd, act, ws);
  const int64_t planes = s.n * s.c;
  backward_finalize<<<static_cast<unsigned>((planes + 255) / 256), 256, 0, stream>>>(planes, t.chunks, ws, sum_dz,
                                                                                     sum_dz_xhat);
  backward_apply<T><<<grid, kThreads, 0, stream>>>(s, t.tc, t.rows, t.chunk_rows, dyt, yt, xt, rt, mean, rstd, w, act,
                                                   sum_dz, sum_dz_xhat, static_cast<T*>(dx), static_cast<T*>(dz));
}

}  // namespace

int64_t workspace_floats(const NormShape& shape) {
  const Tiling t = tiling(shape);
  return shape.n * shape.c * t.chunks * 2;
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
