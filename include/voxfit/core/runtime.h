#pragma once
// Process-wide runtime facts and settings: versions, devices, threads.
#include <cstdint>
#include <string>
#include <vector>

namespace voxfit {

/// voxfit's own version ("0.1.0").
std::string voxfit_version();
/// LibTorch's version as its headers state it ("1.13.0", "2.11.0").
std::string torch_version();

struct GpuInfo {
  int index = 0;
  std::string name;
  std::uint64_t total_bytes = 0;  ///< what cudaMemGetInfo reports as total (CUDA-visible memory)
  std::uint64_t free_bytes = 0;
  int major = 0, minor = 0;       ///< compute capability
  int multiprocessors = 0;
};

/// True when this build links a CUDA LibTorch and a GPU is visible.
bool cuda_available();
/// Every visible GPU; empty on CPU-only builds or machines.
std::vector<GpuInfo> cuda_devices();
/// "13.0" or "none".
std::string cuda_runtime_version();
/// "9.10.2" or "none".
std::string cudnn_version();

/// Sets LibTorch's intra-op threads (0 = one per hardware thread) and returns the count in effect.
/// Debian's LibTorch otherwise runs on a single thread.
int configure_threads(int intra_op_threads);
/// Logical CPUs of this machine.
int hardware_threads();

struct HostMemory {
  std::uint64_t total_bytes = 0;
  std::uint64_t available_bytes = 0;
};
/// RAM of this machine from /proc/meminfo (zeros where it cannot be read).
HostMemory host_memory();

}  // namespace voxfit
