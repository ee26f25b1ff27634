#pragma once
// Building blocks for probing "does batch b fit?": recognising an out-of-memory failure and
// getting back to a clean allocator afterwards, so the next probe starts from the same baseline.
#include <c10/core/Device.h>

#include <cstdint>
#include <exception>

namespace voxfit::memory {

/// True for c10::OutOfMemoryError (CUDA caching allocator past its fraction, the CPU budget),
/// for any c10::Error whose message reports an allocation failure (cuBLAS/cuDNN workspaces,
/// LibTorch's default CPU allocator), and for std::bad_alloc.
bool is_oom(const std::exception& e);

/// After catching an OOM, with every tensor of the failed attempt out of scope (and the
/// gradients it may have left dropped: optimizer.zero_grad()): CUDA returns the
/// cached blocks to the driver (the fraction caps what is reserved, so a fragmented cache would
/// make the next probe fail early) and resets the peak statistics; CPU resets the budget's peak.
void recover_after_oom(const c10::Device& device);

/// Bytes of live tensor memory now: the caching allocator's allocated bytes on CUDA, the active
/// CPU budget's current bytes on CPU (0 without one). The baseline a probe must return to.
std::uint64_t current_allocated_bytes(const c10::Device& device);

}  // namespace voxfit::memory
