#include "voxfit/memory/memory_snapshot.h"

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/error.h"
#include "voxfit/core/torch_compat.h"

// compat::kHasMemoryHistory as the preprocessor can see it: the header exists only from 2.1.
#if defined(VOXFIT_WITH_CUDA) && VOXFIT_TORCH_AT_LEAST(2, 1)
#define VOXFIT_MEMORY_HISTORY 1
#include <torch/csrc/cuda/memory_snapshot.h>
#endif

#include <optional>
#include <string>

namespace voxfit::memory {

bool MemoryHistoryRecorder::available() {
#if defined(VOXFIT_MEMORY_HISTORY)
  static_assert(compat::kHasMemoryHistory);
  return true;
#else
  return false;
#endif
}

MemoryHistoryRecorder::MemoryHistoryRecorder(const MemoryHistoryOptions& options) {
#if defined(VOXFIT_MEMORY_HISTORY)
  // enabled "all": keep alloc/free events, not only the current state; context "all": where
  // each block was allocated and freed; stacks "python" records no C++ frames in a C++ process.
  torch::cuda::_record_memory_history(std::optional<std::string>("all"), std::optional<std::string>("all"),
                                      options.cpp_stacks ? "all" : "python", options.max_entries);
#else
  (void)options;
  throw UnsupportedError("--memory-snapshot needs a CUDA build on LibTorch >= 2.1");
#endif
}

MemoryHistoryRecorder::~MemoryHistoryRecorder() {
#if defined(VOXFIT_MEMORY_HISTORY)
  try {
    torch::cuda::_record_memory_history(std::optional<std::string>(), std::optional<std::string>(), "python", 0);
  } catch (...) {
    // Stopping the recording must not throw out of a destructor; the process keeps recording.
  }
#endif
}

void MemoryHistoryRecorder::write_snapshot(const std::filesystem::path& file) const {
#if defined(VOXFIT_MEMORY_HISTORY)
  write_file_atomic(file, torch::cuda::_memory_snapshot_pickled());
#else
  (void)file;
  throw UnsupportedError("--memory-snapshot needs a CUDA build on LibTorch >= 2.1");
#endif
}

}  // namespace voxfit::memory
