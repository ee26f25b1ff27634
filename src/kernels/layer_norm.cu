// Layer norm over the last dimension, forward and backward, for rows of float, half or bfloat16
// with float32 statistics and the output in the input's dtype.
//
// Why: SwinUNETR's rows are narrow (48 channels at the first stage, 221,184 rows a sample at
// 96^3). ATen works a row per thread block there, so most of a block's threads idle, and under
// autocast it runs in float32: the half input is cast first (a copy, which is also what it keeps
// for backward) and the float32 output is cast back to half by the next linear layer. In call 5's
// profile (experiments/speed-vs-compile/results/h100/) its layer norms took 3.8 of 63.6 ms, about
// ten times what their bytes need at HBM speed (docs/performance-notes.md, note 31).
//
// Here one warp owns a row (a few rows at a time below 256 channels, so that every thread has
// about eight loads in flight): its elements sit in registers, the sums are warp shuffles, nothing
// else is kept than the input as given and two floats a row. Rows wider than 1024 (the deep stages'
// patch merging, few rows) take a loop over memory instead of registers. The parameters' gradients
// are column sums: each warp adds its rows' terms in registers and writes one partial row, which
// the caller adds up in a fixed order (no atomics: the same input gives the same bits).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "device_common.cuh"
#include "layer_norm_launch.h"

namespace voxfit::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// The widest row kept in registers: 32 elements a lane.
constexpr int64_t kMaxRegisterWidth = 1024;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Elements a lane holds (a power of two covering width / 32) and rows a warp takes at once: about
// eight elements in flight per thread.
int per_lane(int64_t width) {
  int per = 1;
  while (per * 32 < width) per *= 2;
  return per;
}
constexpr int rows_for(int per) { return per >= 8 ? 1 : 8 / per; }
int rows_at_once(int64_t width) { return width > kMaxRegisterWidth ? 1 : rows_for(per_lane(width)); }

// Blocks of a launch: enough warps for every group of rows, at most four blocks an SM (the warps'
// partial rows in backward grow with the grid).
int blocks_for(const RowShape& s) {
  const int64_t groups = (s.rows + rows_at_once(s.width) - 1) / rows_at_once(s.width);
  const int64_t blocks = std::min<int64_t>((groups + kWarps - 1) / kWarps, int64_t{4} * sm_count());
  return static_cast<int>(std::max<int64_t>(1, blocks));
}

struct Warp {
  int lane;
  int64_t index, count;  // this warp's index in the launch, and the launch's warps
};

__device__ __forceinline__ Warp this_warp() {
  return {static_cast<int>(threadIdx.x % 32), int64_t{blockIdx.x} * kWarps + threadIdx.x / 32,
          int64_t{gridDim.x} * kWarps};
}

// Rows of up to 32 * PER elements in registers, ROWS rows a warp at a time.
template <typename T, int PER, int ROWS>
__global__ void __launch_bounds__(kThreads)
    forward_registers(const T* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias,
                      int64_t rows, int width, float eps, T* __restrict__ y, float* __restrict__ mean,
                      float* __restrict__ rstd) {
  const Warp w = this_warp();
  float wv[PER], bv[PER];
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int col = w.lane + 32 * i;
    wv[i] = weight && col < width ? weight[col] : 1.f;
    bv[i] = bias && col < width ? bias[col] : 0.f;
  }
  for (int64_t first = w.index * ROWS; first < rows; first += w.count * ROWS) {
    float v[ROWS][PER];
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const int col = w.lane + 32 * i;
        v[r][i] = first + r < rows && col < width ? load(x, (first + r) * width + col) : 0.f;
      }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      float s = 0.f;
#pragma unroll
      for (int i = 0; i < PER; ++i) s += v[r][i];
      const float m = warp_sum(s) / width;
      float q = 0.f;
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const float d = w.lane + 32 * i < width ? v[r][i] - m : 0.f;
        q += d * d;
      }
      const float rs = rsqrtf(warp_sum(q) / width + eps);
      const int64_t row = first + r;
      if (row >= rows) continue;
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const int col = w.lane + 32 * i;
        if (col < width) store(y, row * width + col, (v[r][i] - m) * rs * wv[i] + bv[i]);
      }
      if (w.lane == 0) mean[row] = m, rstd[row] = rs;
    }
  }
}

// Rows of 32 vectors to 1024 elements (a vector: the 16 bytes of 8 half / bfloat16 or 4 float
// elements) whose rows start 16-byte aligned, such as ViT's and UNETR's 768: a lane loads and stores
// a vector at a time, chunk c of the row being vectors [32 c + lane]. ViT-B/16's inference takes 25
// of these norms over 12,608 rows a batch; one element a load ran them at about a third of HBM
// speed (0.90 ms of a 6.1 ms batch on an H100).
template <typename T>
constexpr int kVector = 16 / static_cast<int>(sizeof(T));

// ADD: the row normalised is x + residual, rounded to T as ATen's add rounds it, and that sum is
// stored to `sum` too (a pre-norm transformer's residual stream and its next norm in one pass).
template <typename T, int CHUNKS, bool ADD>
__global__ void __launch_bounds__(kThreads)
    forward_vectors(const T* __restrict__ x, const T* __restrict__ residual, const float* __restrict__ weight,
                    const float* __restrict__ bias, int64_t rows, int width, float eps, T* __restrict__ sum,
                    T* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd) {
  constexpr int V = kVector<T>;
  const Warp w = this_warp();
  for (int64_t row = w.index; row < rows; row += w.count) {
    float v[CHUNKS][V];
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int col = (c * 32 + w.lane) * V;
      uint4 raw = col < width ? *reinterpret_cast<const uint4*>(x + row * width + col) : make_uint4(0, 0, 0, 0);
      if constexpr (ADD) {
        if (col < width) {
          const uint4 r = *reinterpret_cast<const uint4*>(residual + row * width + col);
          T* e = reinterpret_cast<T*>(&raw);
          const T* re = reinterpret_cast<const T*>(&r);
#pragma unroll
          for (int i = 0; i < V; ++i) store(e, i, load(e, i) + load(re, i));
          *reinterpret_cast<uint4*>(sum + row * width + col) = raw;
        }
      }
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int i = 0; i < V; ++i) s += v[c][i] = col < width ? load(e, i) : 0.f;
    }
    const float m = warp_sum(s) / width;
    float q = 0.f;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float d = (c * 32 + w.lane) * V < width ? v[c][i] - m : 0.f;
        q += d * d;
      }
    const float rs = rsqrtf(warp_sum(q) / width + eps);
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int col = (c * 32 + w.lane) * V;
      if (col >= width) continue;
      uint4 raw;
      T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
      for (int i = 0; i < V; ++i)
        store(e, i, (v[c][i] - m) * rs * (weight ? weight[col + i] : 1.f) + (bias ? bias[col + i] : 0.f));
      *reinterpret_cast<uint4*>(y + row * width + col) = raw;
    }
    if (w.lane == 0) mean[row] = m, rstd[row] = rs;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Chunks of the vector kernel for these rows (1 to 8), or 0 where it does not apply.
template <typename T>
int vector_chunks(const RowShape& s, const void* x, const void* y) {
  constexpr int64_t chunk = 32 * kVector<T>;
  if (!aligned16(x) || !aligned16(y) || s.width % kVector<T> != 0 || s.width < chunk || s.width > kMaxRegisterWidth)
    return 0;
  return static_cast<int>((s.width + chunk - 1) / chunk);
}

// Calls f with std::integral_constant<int, CHUNKS> for 1 to 8 chunks; false for any other count.
template <typename F>
bool with_chunks(int chunks, F&& f) {
  switch (chunks) {
    case 1: return f(std::integral_constant<int, 1>{}), true;
    case 2: return f(std::integral_constant<int, 2>{}), true;
    case 3: return f(std::integral_constant<int, 3>{}), true;
    case 4: return f(std::integral_constant<int, 4>{}), true;
    case 5: return f(std::integral_constant<int, 5>{}), true;
    case 6: return f(std::integral_constant<int, 6>{}), true;
    case 7: return f(std::integral_constant<int, 7>{}), true;
    case 8: return f(std::integral_constant<int, 8>{}), true;
    default: return false;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * weight; the warp's column sums of
// dy * xhat and dy go to its partial rows.
template <typename T, int PER, int ROWS>
__global__ void __launch_bounds__(kThreads)
    backward_registers(const T* __restrict__ dy, const T* __restrict__ x, const float* __restrict__ mean,
                       const float* __restrict__ rstd, const float* __restrict__ weight, int64_t rows, int width,
                       T* __restrict__ dx, float* __restrict__ partial_dw, float* __restrict__ partial_db) {
  const Warp w = this_warp();
  float wv[PER], sum_dw[PER], sum_db[PER];
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int col = w.lane + 32 * i;
    wv[i] = weight && col < width ? weight[col] : 1.f;
    sum_dw[i] = sum_db[i] = 0.f;
  }
  for (int64_t first = w.index * ROWS; first < rows; first += w.count * ROWS) {
    float g[ROWS][PER], xh[ROWS][PER];
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const int col = w.lane + 32 * i;
        const bool in = first + r < rows && col < width;
        g[r][i] = in ? load(dy, (first + r) * width + col) : 0.f;
        xh[r][i] = in ? load(x, (first + r) * width + col) : 0.f;
      }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int64_t row = first + r;
      const bool in_rows = row < rows;
      const float m = in_rows ? mean[row] : 0.f, rs = in_rows ? rstd[row] : 0.f;
      float s1 = 0.f, s2 = 0.f;
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const bool in = in_rows && w.lane + 32 * i < width;
        xh[r][i] = in ? (xh[r][i] - m) * rs : 0.f;
        sum_dw[i] += g[r][i] * xh[r][i];
        sum_db[i] += g[r][i];
        g[r][i] *= wv[i];
        s1 += g[r][i];
        s2 += g[r][i] * xh[r][i];
      }
      const float mean_g = warp_sum(s1) / width, mean_gx = warp_sum(s2) / width;
      if (!in_rows) continue;
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const int col = w.lane + 32 * i;
        if (col < width) store(dx, row * width + col, rs * (g[r][i] - mean_g - xh[r][i] * mean_gx));
      }
    }
  }
  if (!partial_dw) return;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int col = w.lane + 32 * i;
    if (col < width) partial_dw[w.index * width + col] = sum_dw[i], partial_db[w.index * width + col] = sum_db[i];
  }
}

// Rows wider than kMaxRegisterWidth: one warp a row, passes over memory (L1 / L2 serve the later
// ones), the warp's column sums accumulated in its own partial rows.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    forward_loop(const T* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias,
                 int64_t rows, int width, float eps, T* __restrict__ y, float* __restrict__ mean,
                 float* __restrict__ rstd) {
  const Warp w = this_warp();
  for (int64_t row = w.index; row < rows; row += w.count) {
    const T* xr = x + row * width;
    float s = 0.f;
    for (int col = w.lane; col < width; col += 32) s += load(xr, col);
    const float m = warp_sum(s) / width;
    float q = 0.f;
    for (int col = w.lane; col < width; col += 32) {
      const float d = load(xr, col) - m;
      q += d * d;
    }
    const float rs = rsqrtf(warp_sum(q) / width + eps);
    for (int col = w.lane; col < width; col += 32)
      store(y, row * width + col,
            (load(xr, col) - m) * rs * (weight ? weight[col] : 1.f) + (bias ? bias[col] : 0.f));
    if (w.lane == 0) mean[row] = m, rstd[row] = rs;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    backward_loop(const T* __restrict__ dy, const T* __restrict__ x, const float* __restrict__ mean,
                  const float* __restrict__ rstd, const float* __restrict__ weight, int64_t rows, int width,
                  T* __restrict__ dx, float* __restrict__ partial_dw, float* __restrict__ partial_db) {
  const Warp w = this_warp();
  if (partial_dw)
    for (int col = w.lane; col < width; col += 32)
      partial_dw[w.index * width + col] = partial_db[w.index * width + col] = 0.f;
  for (int64_t row = w.index; row < rows; row += w.count) {
    const T *dyr = dy + row * width, *xr = x + row * width;
    const float m = mean[row], rs = rstd[row];
    float s1 = 0.f, s2 = 0.f;
    for (int col = w.lane; col < width; col += 32) {
      const float d = load(dyr, col), xh = (load(xr, col) - m) * rs, g = d * (weight ? weight[col] : 1.f);
      s1 += g;
      s2 += g * xh;
      if (partial_dw) partial_dw[w.index * width + col] += d * xh, partial_db[w.index * width + col] += d;
    }
    const float mean_g = warp_sum(s1) / width, mean_gx = warp_sum(s2) / width;
    for (int col = w.lane; col < width; col += 32) {
      const float xh = (load(xr, col) - m) * rs, g = load(dyr, col) * (weight ? weight[col] : 1.f);
      store(dx, row * width + col, rs * (g - mean_g - xh * mean_gx));
    }
  }
}

// Calls f with std::integral_constant<int, PER>: the elements a lane holds, 0 for the loop kernels.
template <typename F>
void with_per_lane(int64_t width, F&& f) {
  switch (width > kMaxRegisterWidth ? 0 : per_lane(width)) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 8: return f(std::integral_constant<int, 8>{});
    case 16: return f(std::integral_constant<int, 16>{});
    case 32: return f(std::integral_constant<int, 32>{});
    default: return f(std::integral_constant<int, 0>{});
  }
}

template <typename T>
void forward_typed(const RowShape& s, const void* xv, const float* weight, const float* bias, float eps, void* yv,
                   float* mean, float* rstd, cudaStream_t stream) {
  const auto x = static_cast<const T*>(xv);
  const auto y = static_cast<T*>(yv);
  const unsigned blocks = static_cast<unsigned>(blocks_for(s));
  const int width = static_cast<int>(s.width);
  const auto launch = [&](auto chunks) {
    forward_vectors<T, decltype(chunks)::value, false><<<blocks, kThreads, 0, stream>>>(
        x, nullptr, weight, bias, s.rows, width, eps, nullptr, y, mean, rstd);
  };
  if (with_chunks(vector_chunks<T>(s, x, y), launch)) return;
  with_per_lane(s.width, [&](auto per) {
    constexpr int kPer = decltype(per)::value;
    if constexpr (kPer == 0)
      forward_loop<T><<<blocks, kThreads, 0, stream>>>(x, weight, bias, s.rows, width, eps, y, mean, rstd);
    else
      forward_registers<T, kPer, rows_for(kPer)>
          <<<blocks, kThreads, 0, stream>>>(x, weight, bias, s.rows, width, eps, y, mean, rstd);
  });
}

template <typename T>
bool add_forward_typed(const RowShape& s, const void* xv, const void* rv, const float* weight, const float* bias,
                       float eps, void* sumv, void* yv, float* mean, float* rstd, cudaStream_t stream) {
  if (!aligned16(rv) || !aligned16(sumv)) return false;
  const unsigned blocks = static_cast<unsigned>(blocks_for(s));
  return with_chunks(vector_chunks<T>(s, xv, yv), [&](auto chunks) {
    forward_vectors<T, decltype(chunks)::value, true><<<blocks, kThreads, 0, stream>>>(
        static_cast<const T*>(xv), static_cast<const T*>(rv), weight, bias, s.rows, static_cast<int>(s.width), eps,
        static_cast<T*>(sumv), static_cast<T*>(yv), mean, rstd);
  });
}

template <typename T>
void backward_typed(const RowShape& s, const void* dyv, const void* xv, const float* mean, const float* rstd,
                    const float* weight, void* dxv, float* pdw, float* pdb, cudaStream_t stream) {
  const auto dy = static_cast<const T*>(dyv);
  const auto x = static_cast<const T*>(xv);
  const auto dx = static_cast<T*>(dxv);
  const unsigned blocks = static_cast<unsigned>(blocks_for(s));
  const int width = static_cast<int>(s.width);
  with_per_lane(s.width, [&](auto per) {
    constexpr int kPer = decltype(per)::value;
    if constexpr (kPer == 0)
      backward_loop<T><<<blocks, kThreads, 0, stream>>>(dy, x, mean, rstd, weight, s.rows, width, dx, pdw, pdb);
    else
      backward_registers<T, kPer, rows_for(kPer)>
          <<<blocks, kThreads, 0, stream>>>(dy, x, mean, rstd, weight, s.rows, width, dx, pdw, pdb);
  });
}

}  // namespace

int64_t layer_norm_partial_rows(const RowShape& shape) { return int64_t{blocks_for(shape)} * kWarps; }

void layer_norm_forward(DType dtype, const RowShape& shape, const void* x, const float* weight, const float* bias,
                        float eps, void* y, float* mean, float* rstd, cudaStream_t stream) {
  switch (dtype) {
    case DType::kFloat: return forward_typed<float>(shape, x, weight, bias, eps, y, mean, rstd, stream);
    case DType::kHalf: return forward_typed<__half>(shape, x, weight, bias, eps, y, mean, rstd, stream);
    case DType::kBFloat16: return forward_typed<__nv_bfloat16>(shape, x, weight, bias, eps, y, mean, rstd, stream);
  }
}

bool add_layer_norm_forward(DType dtype, const RowShape& shape, const void* x, const void* residual,
                            const float* weight, const float* bias, float eps, void* sum, void* y, float* mean,
                            float* rstd, cudaStream_t stream) {
  switch (dtype) {
    case DType::kFloat:
      return add_forward_typed<float>(shape, x, residual, weight, bias, eps, sum, y, mean, rstd, stream);
    case DType::kHalf:
      return add_forward_typed<__half>(shape, x, residual, weight, bias, eps, sum, y, mean, rstd, stream);
    case DType::kBFloat16:
      return add_forward_typed<__nv_bfloat16>(shape, x, residual, weight, bias, eps, sum, y, mean, rstd, stream);
  }
  return false;
}

void layer_norm_backward(DType dtype, const RowShape& shape, const void* dy, const void* x, const float* mean,
                         const float* rstd, const float* weight, void* dx, float* partial_dw, float* partial_db,
                         cudaStream_t stream) {
  switch (dtype) {
    case DType::kFloat:
      return backward_typed<float>(shape, dy, x, mean, rstd, weight, dx, partial_dw, partial_db, stream);
    case DType::kHalf:
      return backward_typed<__half>(shape, dy, x, mean, rstd, weight, dx, partial_dw, partial_db, stream);
    case DType::kBFloat16:
      return backward_typed<__nv_bfloat16>(shape, dy, x, mean, rstd, weight, dx, partial_dw, partial_db, stream);
  }
}

}  // namespace voxfit::kernels::cuda
