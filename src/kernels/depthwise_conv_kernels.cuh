#pragma once
// The depthwise 3D convolution's kernels and their tiling (depthwise_conv.cu launches them). Plain
// CUDA C++ on whatever provides load / store (device_common.cuh), the thread indices, __syncthreads
// and __shfl_down_sync: nvcc, or tests/kernels/cuda_emulation.h, which runs this same source on the
// CPU so its indexing is tested on every build.
#include <cstdint>

#ifdef __CUDACC__
#include "device_common.cuh"  // load, store
#endif

namespace voxfit::kernels::cuda {

namespace {

constexpr int kTileW = 32;
constexpr int kTileH = 8;
constexpr int kTileD = 8;
constexpr int kThreads = kTileW * kTileH;
constexpr int kWarps = kThreads / 32;
constexpr int kTilesPerChunk = 4;  // D tiles one weight-gradient block walks
constexpr int64_t kMaxGridYZ = 65535;

struct Grid {
  int64_t tiles_h = 0, tiles_w = 0, tiles_d = 0, chunks_d = 0;
  int64_t tiles_hw() const { return tiles_h * tiles_w; }
};

// The tiles of a D x H x W volume.
Grid grid_of(int64_t d, int64_t h, int64_t w) {
  Grid g;
  g.tiles_h = (h + kTileH - 1) / kTileH;
  g.tiles_w = (w + kTileW - 1) / kTileW;
  g.tiles_d = (d + kTileD - 1) / kTileD;
  g.chunks_d = (g.tiles_d + kTilesPerChunk - 1) / kTilesPerChunk;
  return g;
}

// Fills the block's input tile with its halo (zeros outside the volume) for outputs from (d0, h0, w0).
template <typename T, int K>
__device__ __forceinline__ void stage_tile(const T* __restrict__ plane, float (*xs)[kTileH + K - 1][kTileW + K - 1],
                                           int d0, int h0, int w0, int D, int H, int W) {
  constexpr int P = K / 2, SD = kTileD + K - 1, SH = kTileH + K - 1, SW = kTileW + K - 1;
  for (int i = threadIdx.x; i < SD * SH * SW; i += kThreads) {
    const int sw = i % SW, sh = (i / SW) % SH, sd = i / (SW * SH);
    const int gd = d0 + sd - P, gh = h0 + sh - P, gw = w0 + sw - P;
    float v = 0.f;
    if (gd >= 0 && gd < D && gh >= 0 && gh < H && gw >= 0 && gw < W)
      v = load(plane, (static_cast<int64_t>(gd) * H + gh) * W + gw);
    xs[sd][sh][sw] = v;
  }
}

template <typename T, int K>
__global__ void __launch_bounds__(kThreads)
    depthwise3d_forward_kernel(const T* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                               T* __restrict__ y, int C, int D, int H, int W, int tiles_w) {
  constexpr int SD = kTileD + K - 1, SH = kTileH + K - 1, SW = kTileW + K - 1, K3 = K * K * K;
  __shared__ float xs[SD][SH][SW];
  __shared__ float ws[K3];
  const int64_t plane = blockIdx.x;
  const int c = static_cast<int>(plane % C);
  const int h0 = static_cast<int>(blockIdx.y / tiles_w) * kTileH, w0 = static_cast<int>(blockIdx.y % tiles_w) * kTileW;
  const int d0 = static_cast<int>(blockIdx.z) * kTileD;
  const int64_t volume = static_cast<int64_t>(D) * H * W;
  for (int i = threadIdx.x; i < K3; i += kThreads) ws[i] = w[static_cast<int64_t>(c) * K3 + i];
  stage_tile<T, K>(x + plane * volume, xs, d0, h0, w0, D, H, W);
  __syncthreads();
  const int lw = threadIdx.x % kTileW, lh = threadIdx.x / kTileW;
  float acc[kTileD];
  const float b = bias ? bias[c] : 0.f;
#pragma unroll
  for (int od = 0; od < kTileD; ++od) acc[od] = b;
#pragma unroll
  for (int kh = 0; kh < K; ++kh) {
#pragma unroll
    for (int kw = 0; kw < K; ++kw) {
      float col[SD];
#pragma unroll
      for (int sd = 0; sd < SD; ++sd) col[sd] = xs[sd][lh + kh][lw + kw];
#pragma unroll
      for (int kd = 0; kd < K; ++kd) {
        const float wv = ws[(kd * K + kh) * K + kw];
#pragma unroll
        for (int od = 0; od < kTileD; ++od) acc[od] = fmaf(wv, col[od + kd], acc[od]);
      }
    }
  }
  const int gh = h0 + lh, gw = w0 + lw;
  if (gh >= H || gw >= W) return;
  T* out = y + plane * volume;
#pragma unroll
  for (int od = 0; od < kTileD; ++od) {
    const int gd = d0 + od;
    if (gd < D) store(out, (static_cast<int64_t>(gd) * H + gh) * W + gw, acc[od]);
  }
}

template <typename T, int K>
__global__ void __launch_bounds__(kThreads)
    depthwise3d_weight_kernel(const T* __restrict__ x, const T* __restrict__ dy, float* __restrict__ partial, int D,
                              int H, int W, int tiles_w, int tiles_d) {
  constexpr int SD = kTileD + K - 1, SH = kTileH + K - 1, SW = kTileW + K - 1, K3 = K * K * K, T1 = K3 + 1;
  __shared__ float xs[SD][SH][SW];
  __shared__ float red[kWarps][T1];
  const int64_t plane = blockIdx.x;
  const int h0 = static_cast<int>(blockIdx.y / tiles_w) * kTileH, w0 = static_cast<int>(blockIdx.y % tiles_w) * kTileW;
  const int64_t volume = static_cast<int64_t>(D) * H * W;
  const T* xp = x + plane * volume;
  const T* gp = dy + plane * volume;
  const int lw = threadIdx.x % kTileW, lh = threadIdx.x / kTileW;
  const int gh = h0 + lh, gw = w0 + lw;
  const bool inside = gh < H && gw < W;
  float acc[K3];
#pragma unroll
  for (int t = 0; t < K3; ++t) acc[t] = 0.f;
  float acc_b = 0.f;
  const int first = static_cast<int>(blockIdx.z) * kTilesPerChunk;
  const int last = min(first + kTilesPerChunk, tiles_d);
  for (int tile = first; tile < last; ++tile) {
    const int d0 = tile * kTileD;
    __syncthreads();  // the previous tile's reads are done
    stage_tile<T, K>(xp, xs, d0, h0, w0, D, H, W);
    float g[kTileD];
#pragma unroll
    for (int od = 0; od < kTileD; ++od) {
      const int gd = d0 + od;
      g[od] = inside && gd < D ? load(gp, (static_cast<int64_t>(gd) * H + gh) * W + gw) : 0.f;
      acc_b += g[od];
    }
    __syncthreads();
#pragma unroll
    for (int kh = 0; kh < K; ++kh) {
#pragma unroll
      for (int kw = 0; kw < K; ++kw) {
        float col[SD];
#pragma unroll
        for (int sd = 0; sd < SD; ++sd) col[sd] = xs[sd][lh + kh][lw + kw];
#pragma unroll
        for (int kd = 0; kd < K; ++kd) {
          float s = 0.f;
#pragma unroll
          for (int od = 0; od < kTileD; ++od) s = fmaf(g[od], col[od + kd], s);
          acc[(kd * K + kh) * K + kw] += s;
        }
      }
    }
  }
  // The block's sums: each warp's by shuffles, then the warps' in a fixed order.
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int t = 0; t < T1; ++t) {
    float v = t < K3 ? acc[t] : acc_b;
#pragma unroll
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) red[warp][t] = v;
  }
  __syncthreads();
  const int64_t row = (plane * gridDim.y + blockIdx.y) * gridDim.z + blockIdx.z;
  for (int t = threadIdx.x; t < T1; t += kThreads) {
    float s = 0.f;
    for (int i = 0; i < kWarps; ++i) s += red[i][t];
    partial[row * T1 + t] = s;
  }
}

// dw[c][t] (and db[c]) = the sum of the rows of channel c's planes, samples then blocks in order.
__global__ void depthwise3d_weight_finalize(const float* __restrict__ partial, float* __restrict__ dw,
                                            float* __restrict__ db, int64_t N, int64_t C, int64_t rows_per_plane,
                                            int T1) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= C * T1) return;
  const int64_t c = i / T1;
  const int t = static_cast<int>(i % T1);
  float s = 0.f;
  for (int64_t n = 0; n < N; ++n) {
    const float* rows = partial + (n * C + c) * rows_per_plane * T1;
    for (int64_t r = 0; r < rows_per_plane; ++r) s += rows[r * T1 + t];
  }
  if (t < T1 - 1)
    dw[c * (T1 - 1) + t] = s;
  else if (db)
    db[c] = s;
}

}  // namespace

}  // namespace voxfit::kernels::cuda
