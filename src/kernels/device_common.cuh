#pragma once
// What voxfit's .cu files share: the SM count of the current device, and float loads / stores of
// float, half and bfloat16 elements.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace voxfit::kernels::cuda {

/// The current device's multiprocessors (cached per device; 132, an H100's, if unknown).
inline int sm_count() {
  constexpr int kMaxDevices = 64;
  static int counts[kMaxDevices] = {};
  int device = 0;
  cudaGetDevice(&device);
  if (device < 0 || device >= kMaxDevices) return 132;
  if (counts[device] == 0) {
    int n = 0;
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device);
    counts[device] = n > 0 ? n : 132;
  }
  return counts[device];
}

template <typename T>
__device__ __forceinline__ float load(const T* p, int64_t i) {
  return static_cast<float>(p[i]);
}
template <typename T>
__device__ __forceinline__ void store(T* p, int64_t i, float v) {
  p[i] = static_cast<T>(v);
}

}  // namespace voxfit::kernels::cuda
