#include "voxfit/core/runtime.h"

#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <dlfcn.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "voxfit/core/error.h"

#if defined(VOXFIT_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace voxfit {

std::string voxfit_version() { return VOXFIT_VERSION; }

std::string torch_version() { return TORCH_VERSION; }

bool cuda_available() { return torch::cuda::is_available(); }

std::string no_gpu_reason() {
#if !defined(VOXFIT_WITH_CUDA)
  return "this voxfit is built against a CPU-only LibTorch (" + torch_version() + ")";
#else
  if (cuda_available()) return "";
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v && (!*v || std::string(v) == "-1"))
    return std::string("CUDA_VISIBLE_DEVICES is ") + (*v ? "-1" : "empty") + ": every GPU is hidden";
  // The driver's own answer, through its library (no CUDA header needed): what cuInit says.
  void* driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!driver) return "no NVIDIA driver (libcuda.so.1 cannot be loaded)";
  using Init = int (*)(unsigned);
  using ErrorString = int (*)(int, const char**);
  using Count = int (*)(int*);
  const auto init = reinterpret_cast<Init>(::dlsym(driver, "cuInit"));
  const auto error_string = reinterpret_cast<ErrorString>(::dlsym(driver, "cuGetErrorString"));
  const auto count = reinterpret_cast<Count>(::dlsym(driver, "cuDeviceGetCount"));
  std::string reason = "the NVIDIA driver reports no usable device";
  if (init && count) {
    const int rc = init(0);
    int n = 0;
    const char* text = nullptr;
    if (rc != 0 && error_string && error_string(rc, &text) == 0 && text)
      reason = std::string("the NVIDIA driver cannot start: ") + text;
    else if (rc == 0 && count(&n) == 0 && n == 0)
      reason = "the NVIDIA driver finds no device";
    else if (rc == 0 && n > 0)
      reason = "the driver sees " + std::to_string(n) + " device(s), but LibTorch cannot use them (CUDA " +
               cuda_runtime_version() + " runtime, driver " + cuda_driver_version() + ")";
  }
  ::dlclose(driver);
  return reason;
#endif
}

std::vector<GpuInfo> cuda_devices() {
  std::vector<GpuInfo> out;
#if defined(VOXFIT_WITH_CUDA)
  if (!cuda_available()) return out;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return out;
  int previous = 0;
  cudaGetDevice(&previous);
  for (int i = 0; i < count; ++i) {
    GpuInfo g;
    g.index = i;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    g.name = prop.name;
    g.major = prop.major;
    g.minor = prop.minor;
    g.multiprocessors = prop.multiProcessorCount;
    size_t free_b = 0, total_b = 0;
    cudaSetDevice(i);
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
      g.free_bytes = free_b;
      g.total_bytes = total_b;
    }
    out.push_back(g);
  }
  cudaSetDevice(previous);
#endif
  return out;
}

std::string cuda_runtime_version() {
#if defined(VOXFIT_WITH_CUDA)
  int v = 0;
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
#endif
  return "none";
}

std::string cuda_driver_version() {
#if defined(VOXFIT_WITH_CUDA)
  int v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess && v > 0)
    return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
#endif
  return "none";
}

std::string cudnn_version() {
  if (!at::detail::getCUDAHooks().hasCuDNN()) return "none";
  const long v = at::detail::getCUDAHooks().versionCuDNN();
  // cuDNN >= 9 encodes major*10000 + minor*100 + patch; cuDNN 8 major*1000 + minor*100 + patch.
  if (v >= 90000)
    return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100);
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 100) + "." + std::to_string(v % 100);
}

int hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

int threads_from_environment() {
  for (const char* name : {"OMP_NUM_THREADS", "MKL_NUM_THREADS"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(value, &end, 10);
    if (end == value || errno != 0 || n < 1 || n > kMaxThreads || (*end != '\0' && *end != ','))
      throw ConfigError(std::string(name) + "=" + value + ": not a thread count in 1.." + std::to_string(kMaxThreads));
    return static_cast<int>(n);
  }
  return 0;
}

int configure_threads(int intra_op_threads) {
  int n = intra_op_threads;
  if (n <= 0) n = threads_from_environment();
  if (n <= 0) n = hardware_threads();
  at::set_num_threads(n);
  return at::get_num_threads();
}

HostMemory host_memory() {
  HostMemory m;
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string key;
    std::uint64_t kib = 0;
    ss >> key >> kib;
    if (key == "MemTotal:") m.total_bytes = kib * 1024;
    if (key == "MemAvailable:") m.available_bytes = kib * 1024;
  }
  return m;
}

}  // namespace voxfit
