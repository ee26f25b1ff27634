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

// Units: a thread may load V elements at once (16 bytes: 8 half / bfloat16 or 4 floats) where the
// launcher finds the tensor's shape and every pointer aligned for it (instance_norm.cu,
// vector_width). In NCDHW a unit is V consecutive rows of one plane: a block's rows [r0, r1) are
// the units [r0 / V, r1 / V), rounded down at both ends, so the chunks' units still cover a plane
// of whole units once. In channels-last (kChannels) a unit is V consecutive channels of one row: a
// thread then keeps V channels' statistics. V = 1 is one element a row, in either layout.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// Units a thread loads before using them: with V elements a unit, fewer suffice for the bytes in
// flight, and the registers stay bounded (backward holds three tensors' units).
template <int V>
constexpr int kUnrollFor = V > 1 ? 2 : kUnroll;

// Threads per block along the channels (channels-last) and along the rows.
struct Tiling {
  int tc = 1;         // threads along the channels (1 for NCDHW), each with `width` channels
  int rows = 1;       // rows a block steps over at once
  int64_t tiles = 0;  // blocks along x: instances (NCDHW) or N * channel tiles (channels-last)
  int chunks = 1;     // blocks along y: pieces of the spatial rows, chunks / samples to a sample's plane
  int64_t chunk_rows = 0;
};

// `sms`: the device's multiprocessors (sm_count() on a GPU); `width`: channels a thread of a
// channels-last block covers (its unit; 1 for NCDHW whatever its units).
Tiling tiling(const NormShape& s, int sms, int width = 1) {
  Tiling t;
  if (s.channels_last) {
    t.tc = static_cast<int>(std::min<int64_t>((s.c + width - 1) / width, 32));
    t.rows = kThreads / t.tc;
    const int64_t tile_c = int64_t{t.tc} * width;
    t.tiles = s.n * ((s.c + tile_c - 1) / tile_c);
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

// Where a thread of a block works: the instance (plane = n * C + c) of its first channel, the first
// element's offset and the distance between consecutive rows. A channels-last thread covers the
// `width` channels c, c + 1, ... (planes plane, plane + 1, ...).
struct Place {
  bool active = false;
  int64_t plane = 0, base = 0, stride = 1, c = 0;
  int ty = 0;
};

__device__ Place place(const NormShape& s, int tc, int rows, int width = 1) {
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
  const int64_t tile_c = int64_t{tc} * width, tiles_c = (s.c + tile_c - 1) / tile_c;
  const int64_t n = blockIdx.x / tiles_c;
  p.c = (blockIdx.x % tiles_c) * tile_c + int64_t{tid % tc} * width;
  p.ty = tid / tc;
  p.active = p.ty < rows && p.c < s.c;
  p.plane = n * s.c + p.c;
  p.base = n * s.s * s.c + p.c;
  p.stride = s.c;
  return p;
}

// A thread's units within its block's rows: unit i starts at base + i * step; [u0, u1).
struct Units {
  int64_t base = 0, step = 1, u0 = 0, u1 = 0;
};

template <int V, bool kChannels>
__device__ Units units(const NormShape& s, const Place& p, int64_t chunk_rows) {
  constexpr bool kAlongRows = V > 1 && !kChannels;
  const Span sp = span(s, chunk_rows);
  Units u;
  u.base = p.base + sp.offset;
  u.step = kAlongRows ? V : p.stride;
  u.u0 = kAlongRows ? sp.r0 / V : sp.r0;
  u.u1 = kAlongRows ? sp.r1 / V : sp.r1;
  return u;
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
// block's two sums of instance `plane` to partial[(plane * chunks + chunk) * 2 + {0, 1}].
__device__ void block_partials(bool active, int ty, int64_t plane, float v0, float v1, int tc, int rows,
                               float* partial) {
  __shared__ float sh0[kThreads], sh1[kThreads];
  const int tid = threadIdx.x;
  sh0[tid] = v0;
  sh1[tid] = v1;
  __syncthreads();
  int reach = 1;
  while (reach < rows) reach <<= 1;
  for (int off = reach >> 1; off > 0; off >>= 1) {
    const int t = tid / tc, lane = tid % tc;
    if (t < off && t + off < rows && t < rows) {
      sh0[t * tc + lane] += sh0[(t + off) * tc + lane];
      sh1[t * tc + lane] += sh1[(t + off) * tc + lane];
    }
    __syncthreads();
  }
  if (active && ty == 0) {
    float* out = partial + (plane * gridDim.y + blockIdx.y) * 2;
    out[0] = sh0[tid];
    out[1] = sh1[tid];
  }
  __syncthreads();  // the next call's stores wait for these reads
}

// The statistics slots of a thread: one (NCDHW: every element of its units is one plane's), or
// its V channels' (kChannels).
template <int V, bool kChannels>
constexpr int kSlots = kChannels ? V : 1;

// Each slot's sums over the block, to its plane's partial row.
template <int A>
__device__ void slot_partials(const Place& p, const float (&v0)[A], const float (&v1)[A], int tc, int rows,
                              float* partial) {
#pragma unroll
  for (int a = 0; a < A; ++a) block_partials(p.active, p.ty, p.plane + a, v0[a], v1[a], tc, rows, partial);
}

template <int V, typename T>
__device__ __forceinline__ void load_unit(const T* __restrict__ p, int64_t at, float (&out)[V]) {
  if constexpr (V == 1) {
    out[0] = load(p, at);
  } else {
    const Pack<T, V> pack = *reinterpret_cast<const Pack<T, V>*>(p + at);
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = static_cast<float>(pack.v[k]);
  }
}

template <int V, typename T>
__device__ __forceinline__ void store_unit(T* __restrict__ p, int64_t at, const float (&in)[V]) {
  if constexpr (V == 1) {
    store(p, at, in[0]);
  } else {
    Pack<T, V> pack;
#pragma unroll
    for (int k = 0; k < V; ++k) pack.v[k] = static_cast<T>(in[k]);
    *reinterpret_cast<Pack<T, V>*>(p + at) = pack;
  }
}

template <typename T, int V, bool kChannels>
__global__ void forward_stats(NormShape s, int tc, int rows, int64_t chunk_rows, const T* __restrict__ x,
                              float* __restrict__ partial) {
  constexpr int U = kUnrollFor<V>, A = kSlots<V, kChannels>;
  const Place p = place(s, tc, rows, kChannels ? V : 1);
  float s1[A], s2[A];
#pragma unroll
  for (int a = 0; a < A; ++a) s1[a] = s2[a] = 0.f;
  if (p.active) {
    // Each instance's first element: every block of an instance (every sample's) shifts by it.
    float shift[V];
#pragma unroll
    for (int k = 0; k < V; ++k) shift[k] = load(x, p.base + (kChannels ? k : 0));
    const Units w = units<V, kChannels>(s, p, chunk_rows);
    for (int64_t r = w.u0 + p.ty; r < w.u1; r += int64_t{rows} * U) {
      float v[U][V];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t unit = r + int64_t{u} * rows;
        if (unit < w.u1) {
          load_unit<V>(x, w.base + unit * w.step, v[u]);
        } else {
#pragma unroll
          for (int k = 0; k < V; ++k) v[u][k] = shift[k];  // past the end: adds nothing
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float d = v[u][k] - shift[k];
          s1[kChannels ? k : 0] += d;
          s2[kChannels ? k : 0] += d * d;
        }
      }
    }
  }
  slot_partials<A>(p, s1, s2, tc, rows, partial);
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

template <typename T, int V, bool kChannels>
__global__ void forward_apply(NormShape s, int tc, int rows, int64_t chunk_rows, const T* __restrict__ x,
                              const float* __restrict__ weight, const float* __restrict__ bias,
                              const T* __restrict__ residual, ActSpec act, const float* __restrict__ mean,
                              const float* __restrict__ rstd, T* __restrict__ y) {
  constexpr int U = kUnrollFor<V>, A = kSlots<V, kChannels>;
  const Place p = place(s, tc, rows, kChannels ? V : 1);
  if (!p.active) return;
  float scale[A], shift[A];
#pragma unroll
  for (int a = 0; a < A; ++a) {
    const float w = weight ? weight[p.c + a] : 1.f, b = bias ? bias[p.c + a] : 0.f;
    scale[a] = rstd[p.plane + a] * w;
    shift[a] = b - mean[p.plane + a] * scale[a];
  }
  const Units w = units<V, kChannels>(s, p, chunk_rows);
  for (int64_t r = w.u0 + p.ty; r < w.u1; r += int64_t{rows} * U) {
    float xv[U][V], rv[U][V];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t unit = r + int64_t{u} * rows;
#pragma unroll
      for (int k = 0; k < V; ++k) xv[u][k] = rv[u][k] = 0.f;
      if (unit < w.u1) {
        load_unit<V>(x, w.base + unit * w.step, xv[u]);
        if (residual) load_unit<V>(residual, w.base + unit * w.step, rv[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t unit = r + int64_t{u} * rows;
      if (unit >= w.u1) continue;
      float out[V];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int a = kChannels ? k : 0;
        out[k] = activate(xv[u][k] * scale[a] + shift[a] + rv[u][k], act);
      }
      store_unit<V>(y, w.base + unit * w.step, out);
    }
  }
}

// What backward reads of element i: dy, y, and x (or else the residual added after the norm).
struct Loaded {
  float dy, y, x;
};

// The U units r, r + rows, ... of a thread (zeros past u1: they add nothing).
template <int V, int U, typename T>
__device__ __forceinline__ void load_units(const Units& w, int64_t r, int rows, const T* __restrict__ dy,
                                           const T* __restrict__ y, const T* __restrict__ x,
                                           const T* __restrict__ residual, Loaded (&v)[U][V]) {
  const T* third = x ? x : residual;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t unit = r + int64_t{u} * rows;
    float a[V], b[V], c[V];
#pragma unroll
    for (int k = 0; k < V; ++k) a[k] = b[k] = c[k] = 0.f;
    if (unit < w.u1) {
      load_unit<V>(dy, w.base + unit * w.step, a);
      load_unit<V>(y, w.base + unit * w.step, b);
      if (third) load_unit<V>(third, w.base + unit * w.step, c);
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

template <typename T, int V, bool kChannels>
__global__ void backward_reduce(NormShape s, int tc, int rows, int64_t chunk_rows, const T* __restrict__ dy,
                                const T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ residual,
                                const float* __restrict__ mean, const float* __restrict__ rstd, ActSpec act,
                                float* __restrict__ partial) {
  constexpr int U = kUnrollFor<V>, A = kSlots<V, kChannels>;
  const Place p = place(s, tc, rows, kChannels ? V : 1);
  float sa[A], sb[A];
#pragma unroll
  for (int a = 0; a < A; ++a) sa[a] = sb[a] = 0.f;
  if (p.active) {
    float m[A], rs[A];
#pragma unroll
    for (int a = 0; a < A; ++a) m[a] = x ? mean[p.plane + a] : 0.f, rs[a] = rstd[p.plane + a];
    const Units w = units<V, kChannels>(s, p, chunk_rows);
    for (int64_t r = w.u0 + p.ty; r < w.u1; r += int64_t{rows} * U) {
      Loaded v[U][V];
      load_units<V, U>(w, r, rows, dy, y, x, residual, v);
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const int a = kChannels ? k : 0;
          float dz, xhat;
          backward_terms(v[u][k], x != nullptr, m[a], rs[a], act, dz, xhat);  // past the end dz = 0: adds nothing
          sa[a] += dz;
          sb[a] += dz * xhat;
        }
      }
    }
  }
  slot_partials<A>(p, sa, sb, tc, rows, partial);
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

template <typename T, int V, bool kChannels>
__global__ void backward_apply(NormShape s, int tc, int rows, int64_t chunk_rows, const T* __restrict__ dy,
                               const T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ residual,
                               const float* __restrict__ mean, const float* __restrict__ rstd,
                               const float* __restrict__ weight, ActSpec act, const float* __restrict__ sum_dz,
                               const float* __restrict__ sum_dz_xhat, T* __restrict__ dx, T* __restrict__ dz_out) {
  constexpr int U = kUnrollFor<V>, A = kSlots<V, kChannels>;
  const Place p = place(s, tc, rows, kChannels ? V : 1);
  if (!p.active) return;
  const float count = static_cast<float>(instance_rows(s));
  float m[A], rs[A], scale[A], mean_dz[A], mean_dz_xhat[A];
#pragma unroll
  for (int a = 0; a < A; ++a) {
    m[a] = x ? mean[p.plane + a] : 0.f;
    rs[a] = rstd[p.plane + a];
    scale[a] = rs[a] * (weight ? weight[p.c + a] : 1.f);
    mean_dz[a] = sum_dz[p.plane + a] / count;
    mean_dz_xhat[a] = sum_dz_xhat[p.plane + a] / count;
  }
  const Units w = units<V, kChannels>(s, p, chunk_rows);
  for (int64_t r = w.u0 + p.ty; r < w.u1; r += int64_t{rows} * U) {
    Loaded v[U][V];
    load_units<V, U>(w, r, rows, dy, y, x, residual, v);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t unit = r + int64_t{u} * rows;
      if (unit >= w.u1) continue;
      float dxv[V], dzv[V];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int a = kChannels ? k : 0;
        float xhat;
        backward_terms(v[u][k], x != nullptr, m[a], rs[a], act, dzv[k], xhat);
        dxv[k] = scale[a] * (dzv[k] - mean_dz[a] - xhat * mean_dz_xhat[a]);
      }
      store_unit<V>(dx, w.base + unit * w.step, dxv);
      if (dz_out) store_unit<V>(dz_out, w.base + unit * w.step, dzv);
    }
  }
}

}  // namespace

}  // namespace voxfit::kernels::cuda
