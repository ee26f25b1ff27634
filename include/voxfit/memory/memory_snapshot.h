#pragma once
// --memory-snapshot FILE: the CUDA caching allocator's history (every alloc/free with sizes and
// segments) as the pickle that PyTorch's memory visualiser (pytorch.org/memory_viz,
// torch/cuda/_memory_viz.py) opens. LibTorch >= 2.1 with CUDA only.
#include <cstddef>
#include <filesystem>

namespace voxfit::memory {

struct MemoryHistoryOptions {
  /// Alloc/free events kept (the oldest are dropped); PyTorch's docs suggest 100000.
  std::size_t max_entries = 100000;
  /// Also record C++ stack traces per allocation: readable frames in the visualiser, but slow
  /// to record and to symbolise when the snapshot is written.
  bool cpp_stacks = false;
};

/// Records the history while alive (recording stops in the destructor).
class MemoryHistoryRecorder {
 public:
  /// UnsupportedError where available() is false.
  explicit MemoryHistoryRecorder(const MemoryHistoryOptions& options = {});
  ~MemoryHistoryRecorder();
  MemoryHistoryRecorder(const MemoryHistoryRecorder&) = delete;
  MemoryHistoryRecorder& operator=(const MemoryHistoryRecorder&) = delete;

  /// Writes the snapshot so far to `file` atomically (IoError on failure).
  void write_snapshot(const std::filesystem::path& file) const;

  /// True in a CUDA build on LibTorch >= 2.1 (compat::kHasMemoryHistory).
  static bool available();
};

}  // namespace voxfit::memory
