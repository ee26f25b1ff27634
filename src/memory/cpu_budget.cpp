#include "voxfit/memory/cpu_budget.h"

#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <new>

#include "voxfit/core/error.h"
#include "voxfit/core/host_memory.h"
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

  CpuAllocatorStats stats() const { return {cap, current.load(), peak.load(), allocations.load(), ooms.load()}; }
};

}  // namespace detail

namespace {

using detail::CpuBudgetState;

// Every allocation carries this header in the 64 bytes before the data LibTorch sees. oneDNN
// (mkldnn convolutions) allocates through the raw interface (raw_allocate / raw_deleter), which
// needs the DataPtr's context to be the data pointer itself; the header gives the deleter what it
// needs from that pointer alone: the previous allocator's DataPtr (which frees the block, header
// included), the size charged and the budget it was charged to. 64 bytes keep LibTorch's
// 64-byte alignment of the data.
struct Header {
  c10::DataPtr block;
  std::uint64_t bytes;
  std::shared_ptr<CpuBudgetState> state;  // null when allocated outside any budget
};
constexpr std::size_t kHeaderBytes = 64;
static_assert(sizeof(Header) <= kHeaderBytes, "the header must fit in front of the data");

void delete_tracked(void* data) {
  if (data == nullptr) return;
  auto* header = reinterpret_cast<Header*>(static_cast<char*>(data) - kHeaderBytes);
  const c10::DataPtr block = std::move(header->block);  // freed last, header and all
  const std::shared_ptr<CpuBudgetState> state = std::move(header->state);
  const std::uint64_t bytes = header->bytes;
  header->~Header();
  if (state) state->release(bytes);
}

// One process-wide instance that is never destroyed before exit: a StorageImpl keeps the
// allocator it was made with and calls it again on resize_, possibly after the budget ended, so
// the object must outlive every tensor (c10::SetAllocator documents the same requirement).
class CappedCpuAllocator final : public c10::Allocator {
 public:
  // LibTorch 1.13 declares `allocate(size_t) const`; 2.3+ dropped the const. Declaring both
  // overrides whichever this LibTorch has (the other is a plain overload), so no version test;
  // for the same reason no member says `override` (clang wants all or none).
  c10::DataPtr allocate(size_t n) const { return allocate_counted(n); }
  c10::DataPtr allocate(size_t n) { return allocate_counted(n); }
  // Pure virtual from LibTorch 2.3 (used by Allocator::clone); plain memcpy as the default CPU allocator.
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }
  c10::DeleterFnPtr raw_deleter() const { return &delete_tracked; }

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
    // A storage made under a budget keeps this allocator after the budget ends (resize_); such
    // calls are served uncounted, with the same layout so that the raw interface holds. So is the
    // host memory of the emulated GPU system (a HostMemoryScope: the loader's batches).
    auto state = in_host_memory_scope() ? nullptr : std::atomic_load(&state_);
    if (n == 0) return c10::DataPtr(nullptr, nullptr, &delete_tracked, c10::Device(c10::DeviceType::CPU));
    if (state && !state->try_reserve(n)) {
      state->ooms.fetch_add(1, std::memory_order_relaxed);
      // Built without TORCH_CHECK_WITH's stack trace: LibTorch 1.13 symbolises it eagerly, about
      // 0.3 s an OOM here, and the max-batch search provokes OOMs on purpose. `{}` is an empty
      // backtrace in 1.13 (std::string) and 2.x (a null lazy backtrace).
      throw c10::OutOfMemoryError("CPU out of memory: tried to allocate " + format_bytes(n) + " with " +
                                      format_bytes(state->current.load()) + " of the " + format_bytes(state->cap) +
                                      " CPU budget in use (voxfit capped CPU allocator)",
                                  {});
    }
    c10::DataPtr block;
    try {
      block = previous->allocate(n + kHeaderBytes);
    } catch (...) {
      if (state) state->release(n);
      throw;
    }
    char* base = static_cast<char*>(block.get());
    const c10::Device device = block.device();
    new (base) Header{std::move(block), n, std::move(state)};
    void* data = base + kHeaderBytes;
    return c10::DataPtr(data, data, &delete_tracked, device);
  }

  std::mutex install_mutex_;
  std::atomic<c10::Allocator*> previous_{nullptr};
  std::shared_ptr<CpuBudgetState> state_;  // accessed with std::atomic_load/store only
};

CappedCpuAllocator& capped_allocator() {
  // Deliberately never destroyed (see above): a storage made under a budget keeps a pointer to
  // this allocator, and a tensor held by some static may still be resized after a function-local
  // static's destructor has run at exit.
  static auto* const instance = new CappedCpuAllocator;
  return *instance;
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
