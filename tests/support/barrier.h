#pragma once
// A reusable barrier for the threads of a test (std::barrier is C++20): the CPU budget's
// concurrency tests and the CPU emulation of CUDA kernels (tests/kernels/cuda_emulation.h).
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace voxfit::test {

class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}
  /// Blocks until `count` threads have arrived; then the barrier is ready for the next round.
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const std::uint64_t generation = generation_;
    if (++arrived_ == count_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation != generation_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  const int count_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
};

}  // namespace voxfit::test
