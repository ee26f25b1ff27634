#include "voxfit/memory/oom.h"

#include <c10/util/Exception.h>

#include <new>
#include <string>

#include "voxfit/core/error.h"
#include "voxfit/core/torch_compat.h"
#include "voxfit/memory/cpu_budget.h"

namespace voxfit::memory {

namespace {

#if defined(VOXFIT_WITH_CUDA)
int cuda_index(const c10::Device& device) { return device.has_index() ? device.index() : 0; }
#endif

}  // namespace

bool is_oom(const std::exception& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return true;
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) return true;
  // The TorchScript interpreter rethrows an allocation failure in a scripted network's forward or
  // backward as a plain error whose last line is the allocator's.
  const auto* c10e = dynamic_cast<const c10::Error*>(&e);
  if (c10e == nullptr && !is_script_error(e.what())) return false;
  // Allocation failures that do not arrive as OutOfMemoryError: cuBLAS/cuDNN handles and
  // workspaces created with cudaMalloc outside the caching allocator, and the default CPU allocator.
  return reports_allocation_failure(c10e ? c10e->msg() : error_line(e.what()));
}

void recover_after_oom(const c10::Device& device) {
  if (device.is_cuda()) {
#if defined(VOXFIT_WITH_CUDA)
    compat::cuda_alloc::emptyCache();
    compat::reset_peak_stats(cuda_index(device));
#else
    throw UnsupportedError("recover_after_oom: this build has no CUDA");
#endif
    return;
  }
  reset_cpu_budget_peak();
}

std::uint64_t current_allocated_bytes(const c10::Device& device) {
  if (device.is_cuda()) {
#if defined(VOXFIT_WITH_CUDA)
    // Index 0 of a StatArray is StatType::AGGREGATE (all pools) in 1.13 and 2.x.
    return static_cast<std::uint64_t>(compat::device_stats(cuda_index(device)).allocated_bytes[0].current);
#else
    throw UnsupportedError("current_allocated_bytes: this build has no CUDA");
#endif
  }
  const auto stats = active_cpu_budget_stats();
  return stats ? stats->current_bytes : 0;
}

}  // namespace voxfit::memory
