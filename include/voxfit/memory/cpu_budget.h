#pragma once
// A CPU memory budget: LibTorch's CPU allocator wrapped so that tensor memory past a cap raises
// c10::OutOfMemoryError, exactly as the CUDA caching allocator does past its memory fraction.
// That lets the max-batch search (and its tests) run on a machine without a GPU.
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>

namespace voxfit::memory {

namespace detail {
struct CpuBudgetState;
}

/// Counters of the CPU budget allocator (bytes of tensor storage, as LibTorch asked for them).
struct CpuAllocatorStats {
  std::uint64_t cap_bytes = 0;
  std::uint64_t current_bytes = 0;  ///< live now
  std::uint64_t peak_bytes = 0;     ///< most live at once since the budget began or reset_peak()
  std::uint64_t allocations = 0;    ///< successful allocations since the budget began
  std::uint64_t ooms = 0;           ///< allocations refused for the cap since the budget began
};

/// While alive, every LibTorch CPU allocation (c10::GetAllocator(kCPU): empty, ops' outputs,
/// autograd buffers, loader batches) goes through a counting allocator that delegates to the
/// previous one and throws c10::OutOfMemoryError past `cap_bytes`. The destructor puts the
/// previous allocator back. One budget at a time per process; create it before loader threads
/// start (LibTorch's allocator registry itself is not synchronised). Thread-safe otherwise.
///
/// Tensors may outlive the scope: their frees are counted against the budget they came from.
class ScopedCpuBudget {
 public:
  /// `cap_bytes` = max() counts without capping (profiling without a budget).
  explicit ScopedCpuBudget(std::uint64_t cap_bytes = std::numeric_limits<std::uint64_t>::max());
  ~ScopedCpuBudget();
  ScopedCpuBudget(const ScopedCpuBudget&) = delete;
  ScopedCpuBudget& operator=(const ScopedCpuBudget&) = delete;

  CpuAllocatorStats stats() const;
  std::uint64_t cap_bytes() const;

 private:
  std::shared_ptr<detail::CpuBudgetState> state_;
};

/// The active budget's counters, or nullopt when no ScopedCpuBudget is alive.
std::optional<CpuAllocatorStats> active_cpu_budget_stats();
/// Sets the active budget's peak to its current bytes (no-op without one): the start of a phase
/// or probe whose own peak is wanted.
void reset_cpu_budget_peak();

}  // namespace voxfit::memory
