#include "voxfit/core/cuda_graph.h"

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>

namespace voxfit::core {

namespace {

class GraphStep final : public CapturedStep {
 public:
  GraphStep(const std::function<void()>& step, int device_index, int warmup_runs, bool release_cached,
            bool other_threads_free) {
    // A device without an index ("cuda") is the current one.
    const auto device = device_index < 0 ? c10::cuda::current_device() : static_cast<c10::DeviceIndex>(device_index);
    c10::cuda::CUDAGuard device_guard(device);
    // Capture is illegal on the legacy default stream, and the side stream must not start before
    // the weights and inputs queued on the default stream exist.
    torch::cuda::synchronize(device);
    c10::cuda::CUDAStreamGuard stream_guard(c10::cuda::getStreamFromPool(false, device));
    for (int i = 0; i < warmup_runs; ++i) step();
    torch::cuda::synchronize(device);
    if (release_cached) c10::cuda::CUDACachingAllocator::emptyCache();
    graph_.capture_begin({0, 0}, other_threads_free ? cudaStreamCaptureModeThreadLocal : cudaStreamCaptureModeGlobal);
    step();
    graph_.capture_end();
    torch::cuda::synchronize(device);
  }

  void replay() override { graph_.replay(); }

 private:
  at::cuda::CUDAGraph graph_;
};

}  // namespace

std::unique_ptr<CapturedStep> capture_step(const std::function<void()>& step, int device_index, int warmup_runs,
                                           bool release_cached, bool other_threads_free) {
  return std::make_unique<GraphStep>(step, device_index, warmup_runs, release_cached, other_threads_free);
}

}  // namespace voxfit::core
