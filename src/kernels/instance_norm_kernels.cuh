#pragma once
// The fused norm kernels and their tiling (instance_norm.cu launches them). Plain CUDA C++ on
// whatever provides load / store (device_common.cuh), the thread indices and __syncthreads: nvcc, or
// tests/kernels/cuda_emulation.h, which runs this same source on the CPU so its indexing and
// reductions are tested on every build.
#include <algorithm>
#include <cstdint>

#include "instance_norm_types.h"

#ifdef __CUDACC__
#include "device_common.cuh"  // load, store
#endif

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
  int chunks = 1;     // blocks along y: pieces of the spatial rows, chunks / samples to a sample's plane
  int64_t chunk_rows = 0;
};

// `sms`: the device's multiprocessors (sm_count() on a GPU).
Tiling tiling(const NormShape& s, int sms) {
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
  // About eight resident blocks per SM, but at least four rows per thread in each block; a chunk
  // lies within one sample's plane (samples > 1), so each plane gets the same number of chunks.
  const int64_t target = int64_t{8} * sms;
  int64_t chunks = (target + t.tiles * s.samples - 1) / (t.tiles * s.samples);  // per plane
  chunks = std::min<int64_t>(chunks, std::max<int64_t>(1, s.s / (int64_t{4} * t.rows)));
  chunks = std::max<int64_t>(1, std::min<int64_t>(chunks, 65535 / s.samples));
  t.chunks = static_cast<int>(chunks * s.samples);
  t.chunk_rows = (s.s + chunks - 1) / chunks;
  return t;
}

// The rows [r0, r1) of its sample's plane that a block covers, and where that plane starts relative
// to the first sample's (NCDHW batch norm: samples > 1; else 0).
struct Span {
  int64_t r0 = 0, r1 = 0, offset = 0;
};

__device__ Span span(const NormShape& s, int64_t chunk_rows) {
  const int64_t per_plane = gridDim.y / s.samples, sample = blockIdx.y / per_plane;
  Span b;
  b.r0 = (blockIdx.y % per_plane) * chunk_rows;
  b.r1 = min(s.s, b.r0 + chunk_rows);
  b.offset = sample * s.c * s.s;
  return b;
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

// Units of rows: along an NCDHW plane a thread may load V consecutive elements at once (16 bytes:
// 8 half / bfloat16 or 4 floats) where the launcher finds the plane's length and every pointer
// aligned for it (instance_norm.cu, vector_width); then a thread's "row" is a unit of V elements,
// and a block's rows [r0, r1) are the units [r0 / V, r1 / V): rounded down at both ends, the
// chunks' units still cover a plane of whole units once. V = 1 is one element a row, at any stride
// (channels-last).
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// Units a thread loads before using them: with V elements a unit, fewer suffice for the bytes in
// flight, and the registers stay bounded (backward holds three tensors' units).
template <int V>
constexpr int kUnrollFor = V > 1 ? 2 : kUnroll;

template <int V, typename T>
__device__ __forceinline__ void load_unit(const T* __restrict__ p, int64_t base, int64_t unit, int64_t stride,
                                          float (&out)[V]) {
  if constexpr (V == 1) {
    out[0] = load(p, base + unit * stride);
  } else {
    const Pack<T, V> pack = *reinterpret_cast<const Pack<T, V>*>(p + base + unit * V);
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = static_cast<float>(pack.v[k]);
  }
}

template <int V, typename T>
__device__ __forceinline__ void store_unit(T* __restrict__ p, int64_t base, int64_t unit, int64_t stride,
                                           const float (&in)[V]) {
  if constexpr (V == 1) {
    store(p, base + unit * stride, in[0]);
  } else {
    Pack<T, V> pack;
#pragma unroll
    for (int k = 0; k < V; ++k) pack.v[k] = static_cast<T>(in[k]);
    *reinterpret_cast<Pack<T, V>*>(p + base + unit * V) = pack;
  }
}

template <typename T, int V>
__global__ void forward_stats(NormShape s, int tc, int rows, int64_t chunk_rows, const T* __restrict__ x,
                              float* __restrict__ partial) {
  constexpr int U = kUnrollFor<V>;
  const Place p = place(s, tc, rows);
  float s1 = 0.f, s2 = 0.f;
  if (p.active) {
    const float shift = load(x, p.base);  // the instance's first element: every sample's blocks shift by it
    const Span sp = span(s, chunk_rows);
    const int64_t base = p.base + sp.offset, u1 = sp.r1 / V;
    for (int64_t r = sp.r0 / V + p.ty; r < u1; r += int64_t{rows} * U) {
      float v[U][V];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t unit = r + int64_t{u} * rows;
        if (unit < u1) {
          load_unit<V>(x, base, unit, p.stride, v[u]);
        } else {
#pragma unroll
          for (int k = 0; k < V; ++k) v[u][k] = shift;  // past the end: adds nothing
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float d = v[u][k] - shift;
          s1 += d;
          s2 += d * d;
        }
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
  const double count = static_cast<double>(instance_rows(s));
  const double m1 = s1 / count;
  const double var = fmax(0.0, s2 / count - m1 * m1);
  mean[plane] = static_cast<float>(shift + m1);
  rstd[plane] = static_cast<float>(1.0 / sqrt(var + eps));
}

template <typename T, int V>
__global__ void forward_apply(NormShape s, int tc, int rows, int64_t chunk_rows, const T* __restrict__ x,
                              const float* __restrict__ weight, const float* __restrict__ bias,
                              const T* __restrict__ residual, ActSpec act, const float* __restrict__ mean,
                              const float* __restrict__ rstd, T* __restrict__ y) {
  constexpr int U = kUnrollFor<V>;
  const Place p = place(s, tc, rows);
  if (!p.active) return;
  const float w = weight ? weight[p.c] : 1.f, b = bias ? bias[p.c] : 0.f;
  const float scale = rstd[p.plane] * w, shift = b - mean[p.plane] * scale;
  const Span sp = span(s, chunk_rows);
  const int64_t base = p.base + sp.offset, u1 = sp.r1 / V;
  for (int64_t r = sp.r0 / V + p.ty; r < u1; r += int64_t{rows} * U) {
    float xv[U][V], rv[U][V];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t unit = r + int64_t{u} * rows;
#pragma unroll
      for (int k = 0; k < V; ++k) xv[u][k] = rv[u][k] = 0.f;
      if (unit < u1) {
        load_unit<V>(x, base, unit, p.stride, xv[u]);
        if (residual) load_unit<V>(residual, base, unit, p.stride, rv[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t unit = r + int64_t{u} * rows;
      if (unit >= u1) continue;
      float out[V];
#pragma unroll
      for (int k = 0; k < V; ++k) out[k] = activate(xv[u][k] * scale + shift + rv[u][k], act);
      store_unit<V>(y, base, unit, p.stride, out);
    }
  }
}

// What backward reads of element i: dy, y, and x (or else the residual added after the norm).
struct Loaded {
  float dy, y, x;
};

// The U units r, r + rows, ... of a thread (zeros past u1: they add nothing).
template <int V, int U, typename T>
__device__ __forceinline__ void load_units(int64_t base, int64_t stride, int64_t r, int64_t u1, int rows,
                                           const T* __restrict__ dy, const T* __restrict__ y, const T* __restrict__ x,
                                           const T* __restrict__ residual, Loaded (&v)[U][V]) {
  const T* third = x ? x : residual;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t unit = r + int64_t{u} * rows;
    float a[V], b[V], c[V];
#pragma unroll
    for (int k = 0; k < V; ++k) a[k] = b[k] = c[k] = 0.f;
    if (unit < u1) {
      load_unit<V>(dy, base, unit, stride, a);
      load_unit<V>(y, base, unit, stride, b);
      if (third) load_unit<V>(third, base, unit, stride, c);
    }
#pragma unroll
    for (int k = 0; k < V; ++k) v[u][k] = Loaded{a[k], b[k], c[k]};
  }
}

// dz and the normalised input: from x, or from y less the residual added after it.
__device__ __forceinline__ void backward_terms(const Loaded& v, bool has_x, float mean, float rstd, const ActSpec& act,
                                               float& dz, float& xhat) {
  dz = v.dy * activation_slope(v.y, act);
  xhat = has_x ? (v.x - mean) * rstd : deactivate(v.y, act) - v.x;
}

template <typename T, int V>
__global__ void backward_reduce(NormShape s, int tc, int rows, int64_t chunk_rows, const T* __restrict__ dy,
                                const T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ residual,
                                const float* __restrict__ mean, const float* __restrict__ rstd, ActSpec act,
                                float* __restrict__ partial) {
  constexpr int U = kUnrollFor<V>;
  const Place p = place(s, tc, rows);
  float a = 0.f, b = 0.f;
  if (p.active) {
    const float m = x ? mean[p.plane] : 0.f, rs = rstd[p.plane];
    const Span sp = span(s, chunk_rows);
    const int64_t base = p.base + sp.offset, u1 = sp.r1 / V;
    for (int64_t r = sp.r0 / V + p.ty; r < u1; r += int64_t{rows} * U) {
      Loaded v[U][V];
      load_units<V, U>(base, p.stride, r, u1, rows, dy, y, x, residual, v);
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          float dz, xhat;
          backward_terms(v[u][k], x != nullptr, m, rs, act, dz, xhat);  // past the end dz = 0: adds nothing
          a += dz;
          b += dz * xhat;
        }
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

template <typename T, int V>
__global__ void backward_apply(NormShape s, int tc, int rows, int64_t chunk_rows, const T* __restrict__ dy,
                               const T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ residual,
                               const float* __restrict__ mean, const float* __restrict__ rstd,
                               const float* __restrict__ weight, ActSpec act, const float* __restrict__ sum_dz,
                               const float* __restrict__ sum_dz_xhat, T* __restrict__ dx, T* __restrict__ dz_out) {
  constexpr int U = kUnrollFor<V>;
  const Place p = place(s, tc, rows);
  if (!p.active) return;
  const float m = x ? mean[p.plane] : 0.f, rs = rstd[p.plane];
  const float scale = rs * (weight ? weight[p.c] : 1.f);
  const float count = static_cast<float>(instance_rows(s));
  const float mean_dz = sum_dz[p.plane] / count, mean_dz_xhat = sum_dz_xhat[p.plane] / count;
  const Span sp = span(s, chunk_rows);
  const int64_t base = p.base + sp.offset, u1 = sp.r1 / V;
  for (int64_t r = sp.r0 / V + p.ty; r < u1; r += int64_t{rows} * U) {
    Loaded v[U][V];
    load_units<V, U>(base, p.stride, r, u1, rows, dy, y, x, residual, v);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t unit = r + int64_t{u} * rows;
      if (unit >= u1) continue;
      float dxv[V], dzv[V];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        float xhat;
        backward_terms(v[u][k], x != nullptr, m, rs, act, dzv[k], xhat);
        dxv[k] = scale * (dzv[k] - mean_dz - xhat * mean_dz_xhat);
      }
      store_unit<V>(dx, base, unit, p.stride, dxv);
      if (dz_out) store_unit<V>(dz_out, base, unit, p.stride, dzv);
    }
  }
}

}  // namespace

}  // namespace voxfit::kernels::cuda
