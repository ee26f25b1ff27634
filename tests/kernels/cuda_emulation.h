#pragma once
// Runs voxfit's CUDA kernel source on the CPU, for tests of its indexing, tiling, shared-memory
// staging and reductions on every build (the GPU tests stay the check of the compiled kernels: this
// does not model timing, memory ordering beyond barriers, or the hardware's limits).
//
// A launch runs the blocks one after another; each block's threads are OS threads, so
// `__syncthreads` is a real barrier and a `__shared__` array (a function-local static here) is one
// array for the block. `__shfl_down_sync` exchanges through a per-warp buffer between two barriers
// of the warp: every lane of the warp must call it, as the full mask requires on a GPU.
//
// Include it, then the kernels' .cuh, in a test file of its own, and cuda_emulation_end.h last: the
// CUDA keywords become macros (tests/CMakeLists.txt keeps `*_emulated.cpp` files out of the unity
// build), and the thread indices are declared in voxfit::kernels::cuda, where the kernels find
// them first.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "support/barrier.h"

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

namespace voxfit::kernels::cuda {

struct EmulatedDim3 {
  unsigned x = 1, y = 1, z = 1;
};

namespace emulation {

using Barrier = ::voxfit::test::Barrier;

struct Block {
  explicit Block(int threads) : sync(threads) {
    for (int w = 0; w < (threads + 31) / 32; ++w) warps.push_back(std::make_unique<Barrier>(32));
    lanes.resize(static_cast<std::size_t>(threads));
  }
  Barrier sync;
  std::vector<std::unique_ptr<Barrier>> warps;
  std::vector<float> lanes;
};

inline Block*& current_block() {
  static Block* block = nullptr;
  return block;
}

}  // namespace emulation

inline thread_local EmulatedDim3 threadIdx, blockIdx;
inline EmulatedDim3 blockDim, gridDim;

inline void __syncthreads() { emulation::current_block()->sync.arrive_and_wait(); }

inline float __shfl_down_sync(unsigned /*mask*/, float v, int offset) {
  emulation::Block& b = *emulation::current_block();
  const unsigned lane = threadIdx.x % 32, first = threadIdx.x - lane;
  emulation::Barrier& warp = *b.warps[threadIdx.x / 32];
  b.lanes[threadIdx.x] = v;
  warp.arrive_and_wait();
  const float out = lane + offset < 32 ? b.lanes[first + lane + offset] : v;
  warp.arrive_and_wait();
  return out;
}

inline int min(int a, int b) { return std::min(a, b); }
inline std::int64_t min(std::int64_t a, std::int64_t b) { return std::min(a, b); }
using std::fmaf;

/// kernel<<<grid, threads>>>(...): `body` is the kernel call, run by every thread of every block.
/// `threads` must be a multiple of 32 (whole warps). One OS thread per CUDA thread for the whole
/// launch; the blocks run in order, a barrier apart.
inline void emulate_launch(EmulatedDim3 grid, int threads, const std::function<void()>& body) {
  gridDim = grid;
  blockDim = {static_cast<unsigned>(threads), 1, 1};
  emulation::Block block(threads);
  emulation::Barrier between(threads);
  emulation::current_block() = &block;
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      threadIdx = {static_cast<unsigned>(t), 0, 0};
      for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
          for (unsigned x = 0; x < grid.x; ++x) {
            blockIdx = {x, y, z};
            body();
            between.arrive_and_wait();  // the block is done before the next one starts
          }
    });
  for (auto& th : pool) th.join();
  emulation::current_block() = nullptr;
}

/// The element access of device_common.cuh, for float data.
template <typename T>
inline float load(const T* p, std::int64_t i) {
  return static_cast<float>(p[i]);
}
template <typename T>
inline void store(T* p, std::int64_t i, float v) {
  p[i] = static_cast<T>(v);
}

}  // namespace voxfit::kernels::cuda
