#pragma once
// CUDA-graph capture of a whole step (CUDA builds only): one graph launch replaces the hundreds
// of kernel launches of a ResNet50 or ViT forward, or of a training step's forward, backward and
// optimiser, so the host never limits throughput.
#include <functional>
#include <memory>

namespace voxfit::core {

/// A step recorded once and replayed on the current stream. Its tensors (inputs read, outputs
/// written) must stay alive and keep their addresses while the graph exists.
class CapturedStep {
 public:
  virtual ~CapturedStep() = default;
  virtual void replay() = 0;
};

#if defined(VOXFIT_WITH_CUDA)

/// Runs `step` `warmup_runs` times eagerly on a side stream of `device_index` (filling cuDNN's
/// algorithm cache and the allocator, which capture cannot do), then captures one more run, which
/// therefore has not executed yet: replay() runs it. `release_cached` first returns the caching
/// allocator's unused blocks to the device, so that the graph's private memory pool does not
/// come on top of what eager steps left cached (a training step's activations).
/// `other_threads_free`: only the capturing thread is held to capture's rules (CUDA's thread-local
/// capture mode), so that threads working beside it (a data loader allocating pinned batches,
/// whose cudaHostAlloc and event queries global mode forbids process-wide) go on; the capturing
/// thread and autograd's device thread still launch only into the captured stream.
/// Throws c10::Error if the step does something capture forbids (host syncs, CPU tensors).
std::unique_ptr<CapturedStep> capture_step(const std::function<void()>& step, int device_index, int warmup_runs,
                                           bool release_cached = false, bool other_threads_free = false);

#endif

}  // namespace voxfit::core
