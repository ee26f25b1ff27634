#pragma once
// Host memory of an emulated GPU system. A CPU memory budget (memory::ScopedBudget on the CPU)
// stands in for a card's memory when there is no GPU. What a GPU run keeps in host RAM -- the
// loader's prefetched batches, the volumes read for validation -- is not card memory: code that
// makes such data allocates it inside a HostMemoryScope, and the CPU budget does not charge it.
// What the step copies to the device (the batch it trains on) is charged, as on a GPU.
namespace voxfit {

/// While alive, CPU allocations made by this thread are host memory (not charged to a CPU budget).
class HostMemoryScope {
 public:
  HostMemoryScope();
  ~HostMemoryScope();
  HostMemoryScope(const HostMemoryScope&) = delete;
  HostMemoryScope& operator=(const HostMemoryScope&) = delete;

 private:
  bool previous_;
};

/// Whether this thread is inside a HostMemoryScope.
bool in_host_memory_scope();

}  // namespace voxfit
