#include "voxfit/memory/cpu_budget.h"

#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "voxfit/core/error.h"
#include "voxfit/core/units.h"

namespace voxfit::memory {

namespace detail {

struct CpuBudgetState {
  explicit CpuBudgetState(std::uint64_t cap_) : cap(cap_) {}
  const std::uint64_t cap;
  std::atomic<std::uint64_t> current{0};
  std::atomic<std::uint64_t> peak{0};
  std::atomic<std::uint64_t> allocations{0};
  std::atomic<std::uint64_t> ooms{0};

  // Compare-and-swap so that concurrent allocations can never together pass the cap, and one
  // that fits is never refused because another thread's failed attempt was counted for a moment.
  bool try_reserve(std::uint64_t n) {
    std::uint64_t cur = current.load(std::memory_order_relaxed);
    do {
      if (n > cap || cur > cap - n) return false;
    } while (!current.compare_exchange_weak(cur, cur + n, std::memory_order_relaxed));
    const std::uint64_t now = cur + n;
    std::uint64_t p = peak.load(std::memory_order_relaxed);
    while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
    }
    allocations.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  void release(std::uint64_t n) { current.fetch_sub(n, std::memory_order_relaxed); }

  CpuAllocatorStats stats() const {
    return {cap, current.load(), peak.load(), allocations.load(), ooms.load()};
  }
};

}  // namespace detail

namespace {

using detail::CpuBudgetState;

// The DataPtr context of a counted allocation: the previous allocator's DataPtr (whose deleter
// frees the memory), the size to give back, and the budget it was charged to.
struct TrackedContext {
  c10::DataPtr inner;
  std::uint64_t bytes;
  std::shared_ptr<CpuBudgetState> state;
};

void delete_tracked(void* ctx) {
  std::unique_ptr<TrackedContext> tracked(static_cast<TrackedContext*>(ctx));
  tracked->inner.clear();
  tracked->state->release(tracked->bytes);
}

// One process-wide instance that is never destroyed before exit: a StorageImpl keeps the
// allocator it was made with and calls it again on resize_, possibly after the budget ended, so
// the object must outlive every tensor (c10::SetAllocator documents the same requirement).
class CappedCpuAllocator final : public c10::Allocator {
 public:
  // LibTorch 1.13 declares `allocate(size_t) const`; 2.3+ dropped the const. Declaring both
  // overrides whichever this LibTorch has (the other is a plain overload), so no version test.
  c10::DataPtr allocate(size_t n) const { return allocate_counted(n); }
  c10::DataPtr allocate(size_t n) { return allocate_counted(n); }
  // Pure virtual from LibTorch 2.3 (used by Allocator::clone); plain memcpy as the default CPU allocator.
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }

  void install(std::shared_ptr<CpuBudgetState> state) {
    std::lock_guard<std::mutex> lock(install_mutex_);
    if (std::atomic_load(&state_)) throw Error("a CPU memory budget is already active (one at a time per process)");
    c10::Allocator* current = c10::GetAllocator(c10::DeviceType::CPU);
    if (current != this) previous_.store(current);
    std::atomic_store(&state_, std::move(state));
    c10::SetAllocator(c10::DeviceType::CPU, this);
    if (c10::GetAllocator(c10::DeviceType::CPU) != this) {
      std::atomic_store(&state_, std::shared_ptr<CpuBudgetState>());
      throw UnsupportedError(
          "cannot install the CPU budget allocator: another CPU allocator was registered with a higher priority");
    }
  }

  void uninstall() {
    std::lock_guard<std::mutex> lock(install_mutex_);
    c10::SetAllocator(c10::DeviceType::CPU, previous_.load());
    std::atomic_store(&state_, std::shared_ptr<CpuBudgetState>());
  }

  std::shared_ptr<CpuBudgetState> active() const { return std::atomic_load(&state_); }

 private:
  c10::DataPtr allocate_counted(size_t n) const {
    c10::Allocator* previous = previous_.load();
    auto state = std::atomic_load(&state_);
    // No budget (a storage made under one, resized after it ended) or nothing to count.
    if (!state || n == 0) return previous->allocate(n);
    if (!state->try_reserve(n)) {
      state->ooms.fetch_add(1, std::memory_order_relaxed);
      const std::uint64_t in_use = state->current.load();
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU out of memory: tried to allocate ", format_bytes(n), " with ",
                       format_bytes(in_use), " of the ", format_bytes(state->cap),
                       " CPU budget in use (voxfit capped CPU allocator)");
    }
    auto tracked = std::make_unique<TrackedContext>();
    tracked->bytes = n;
    tracked->state = state;
    try {
      tracked->inner = previous->allocate(n);
    } catch (...) {
      state->release(n);
      throw;
    }
    void* data = tracked->inner.get();
    const c10::Device device = tracked->inner.device();
    return c10::DataPtr(data, tracked.release(), &delete_tracked, device);
  }

  std::mutex install_mutex_;
  std::atomic<c10::Allocator*> previous_{nullptr};
  std::shared_ptr<CpuBudgetState> state_;  // accessed with std::atomic_load/store only
};

CappedCpuAllocator& capped_allocator() {
  static CappedCpuAllocator instance;
  return instance;
}

}  // namespace

ScopedCpuBudget::ScopedCpuBudget(std::uint64_t cap_bytes) : state_(std::make_shared<CpuBudgetState>(cap_bytes)) {
  if (cap_bytes == 0) throw BudgetError("a CPU memory budget must be larger than 0 bytes");
  capped_allocator().install(state_);
}

ScopedCpuBudget::~ScopedCpuBudget() { capped_allocator().uninstall(); }

CpuAllocatorStats ScopedCpuBudget::stats() const { return state_->stats(); }

std::uint64_t ScopedCpuBudget::cap_bytes() const { return state_->cap; }

std::optional<CpuAllocatorStats> active_cpu_budget_stats() {
  if (auto state = capped_allocator().active()) return state->stats();
  return std::nullopt;
}

void reset_cpu_budget_peak() {
  if (auto state = capped_allocator().active()) state->peak.store(state->current.load());
}

}  // namespace voxfit::memory
