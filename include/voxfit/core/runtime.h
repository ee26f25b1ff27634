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
  int major = 0, minor = 0;  ///< compute capability
  int multiprocessors = 0;
};

/// True when this build links a CUDA LibTorch and a GPU is visible.
bool cuda_available();
/// Why no GPU is used, in one phrase ("" when one is): a CPU-only LibTorch, CUDA_VISIBLE_DEVICES
/// empty, no NVIDIA driver, or what the driver says (no device, a driver too old, ...).
std::string no_gpu_reason();
/// Every visible GPU; empty on CPU-only builds or machines.
std::vector<GpuInfo> cuda_devices();
/// "13.0" or "none".
std::string cuda_runtime_version();
/// The CUDA driver's version as cudaDriverGetVersion reports it ("13.0"), or "none".
std::string cuda_driver_version();
/// "9.10.2" or "none".
std::string cudnn_version();

/// The most intra-op threads voxfit accepts: a pool of millions of threads would abort the process
/// at its first parallel region.
inline constexpr int kMaxThreads = 4096;

/// The intra-op threads the environment asks for, read as PyTorch reads them: OMP_NUM_THREADS, else
/// MKL_NUM_THREADS (the first level of a list such as "4,2"); 0 when neither is set. A value that
/// is not a count in 1..kMaxThreads is a ConfigError naming the variable.
int threads_from_environment();

/// Sets LibTorch's intra-op threads and returns the count in effect. 0 means the environment's
/// count (threads_from_environment), else one per hardware thread; Debian's LibTorch otherwise
/// runs on a single thread.
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
