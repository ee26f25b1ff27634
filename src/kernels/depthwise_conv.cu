// Depthwise 3D convolution (one filter per channel, stride 1, zero padding k / 2), forward and
// weight gradient, for NCDHW tensors of float, half or bfloat16 with float32 weights and sums.
//
// Why: MedNeXt's blocks open with a depthwise k^3 convolution. LibTorch sends a depthwise 3D
// convolution in NCDHW to ATen's conv_depthwise3d, whose backward took 42.5% of a MedNeXt-S training
// step's kernel time on an H200 (7.4% more in its forward; experiments/networks/results/h200/
// segresnet): a thread per output element or weight tap, reading every input element k^3 times
// from global memory. Here a block stages an input tile with its halo in shared memory once, and
// each thread keeps a column of outputs along D in registers, so a tap's input column is read once
// for all k taps along D.
//
// Tiles: 32 (W) x 8 (H) threads, each owning one (h, w) and kTileD outputs along D.
//   forward:        grid (planes, H x W tiles, D tiles); one output tile per block.
//   weight grad:    grid (planes, H x W tiles, D chunks); a block walks kTilesPerChunk D tiles,
//                   summing dy x shifted x for every tap in registers, then reduces its 256
//                   threads' sums (warp shuffles, then shared memory) into one workspace row;
//                   a finalize launch adds the rows of each channel in a fixed order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "depthwise_conv_kernels.cuh"
#include "depthwise_conv_launch.h"
#include "device_common.cuh"

namespace voxfit::kernels::cuda {

namespace {

template <typename T, int K>
void forward_typed(const VolumeShape& s, const void* x, const float* w, const float* bias, void* y,
                   cudaStream_t stream) {
  const Grid g = grid_of(s.d, s.h, s.w);
  const dim3 grid(static_cast<unsigned>(s.n * s.c), static_cast<unsigned>(g.tiles_hw()),
                  static_cast<unsigned>(g.tiles_d));
  depthwise3d_forward_kernel<T, K><<<grid, kThreads, 0, stream>>>(
      static_cast<const T*>(x), w, bias, static_cast<T*>(y), static_cast<int>(s.c), static_cast<int>(s.d),
      static_cast<int>(s.h), static_cast<int>(s.w), static_cast<int>(g.tiles_w));
}

template <typename T, int K>
void weight_typed(const VolumeShape& s, const void* x, const void* dy, float* dw, float* db, float* workspace,
                  cudaStream_t stream) {
  const Grid g = grid_of(s.d, s.h, s.w);
  const dim3 grid(static_cast<unsigned>(s.n * s.c), static_cast<unsigned>(g.tiles_hw()),
                  static_cast<unsigned>(g.chunks_d));
  depthwise3d_weight_kernel<T, K><<<grid, kThreads, 0, stream>>>(
      static_cast<const T*>(x), static_cast<const T*>(dy), workspace, static_cast<int>(s.d), static_cast<int>(s.h),
      static_cast<int>(s.w), static_cast<int>(g.tiles_w), static_cast<int>(g.tiles_d));
  constexpr int T1 = K * K * K + 1;
  const int64_t outputs = s.c * T1;
  depthwise3d_weight_finalize<<<static_cast<unsigned>((outputs + 255) / 256), 256, 0, stream>>>(
      workspace, dw, db, s.n, s.c, g.tiles_hw() * g.chunks_d, T1);
}

template <int K>
void forward_kernel(DType dtype, const VolumeShape& s, const void* x, const float* w, const float* bias, void* y,
                    cudaStream_t stream) {
  if (dtype == DType::kHalf)
    forward_typed<__half, K>(s, x, w, bias, y, stream);
  else if (dtype == DType::kBFloat16)
    forward_typed<__nv_bfloat16, K>(s, x, w, bias, y, stream);
  else
    forward_typed<float, K>(s, x, w, bias, y, stream);
}

template <int K>
void weight_kernel(DType dtype, const VolumeShape& s, const void* x, const void* dy, float* dw, float* db,
                   float* workspace, cudaStream_t stream) {
  if (dtype == DType::kHalf)
    weight_typed<__half, K>(s, x, dy, dw, db, workspace, stream);
  else if (dtype == DType::kBFloat16)
    weight_typed<__nv_bfloat16, K>(s, x, dy, dw, db, workspace, stream);
  else
    weight_typed<float, K>(s, x, dy, dw, db, workspace, stream);
}

}  // namespace

bool depthwise3d_supported(const VolumeShape& s, int kernel) {
  if (kernel != 3 && kernel != 5) return false;
  if (s.n <= 0 || s.c <= 0 || s.d <= 0 || s.h <= 0 || s.w <= 0) return false;
  const Grid g = grid_of(s.d, s.h, s.w);
  return s.n * s.c <= 0x7fffffff && g.tiles_hw() <= kMaxGridYZ && g.tiles_d <= kMaxGridYZ && s.d <= 0x7fffffff &&
         s.d * s.h * s.w <= (int64_t{1} << 40);
}

void depthwise3d_forward(DType dtype, const VolumeShape& s, int kernel, const void* x, const float* w,
                         const float* bias, void* y, cudaStream_t stream) {
  if (kernel == 3)
    forward_kernel<3>(dtype, s, x, w, bias, y, stream);
  else
    forward_kernel<5>(dtype, s, x, w, bias, y, stream);
}

int64_t depthwise3d_workspace_floats(const VolumeShape& s, int kernel) {
  const Grid g = grid_of(s.d, s.h, s.w);
  return s.n * s.c * g.tiles_hw() * g.chunks_d * (int64_t{kernel} * kernel * kernel + 1);
}

void depthwise3d_backward_weight(DType dtype, const VolumeShape& s, int kernel, const void* x, const void* dy,
                                 float* dw, float* db, float* workspace, cudaStream_t stream) {
  if (kernel == 3)
    weight_kernel<3>(dtype, s, x, dy, dw, db, workspace, stream);
  else
    weight_kernel<5>(dtype, s, x, dy, dw, db, workspace, stream);
}

}  // namespace voxfit::kernels::cuda
