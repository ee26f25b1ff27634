#pragma once
// Data-parallel gradient averaging overlapped with backward, as PyTorch's DistributedDataParallel
// does it: parameters are grouped into buckets of about 25 MiB in reverse registration order
// (roughly the order backward produces their gradients); a hook on each parameter copies its
// gradient into the bucket's flat buffer, and a bucket whose gradients are all in is all-reduced
// at once, while backward goes on. finish() waits and writes the averages into .grad.
//
// Buckets are launched strictly in index order, so every rank issues the same collectives in the
// same order (NCCL's requirement) whatever order its gradients arrive in. A parameter that gets no
// gradient in a step (an unused head) is sent as zeros and keeps an undefined .grad, as it would
// without data parallelism; the graph is the same on every rank, so all ranks agree.
#include <torch/types.h>

#include <cstddef>
#include <mutex>
#include <vector>

#include "voxfit/dist/communicator.h"

namespace voxfit::dist {

class GradientSynchronizer {
 public:
  /// `parameters`: the trainable leaves, in registration order (all on the communicator's device).
  GradientSynchronizer(std::vector<torch::Tensor> parameters, Communicator& comm, std::size_t bucket_bytes = 25u << 20);
  ~GradientSynchronizer();
  GradientSynchronizer(const GradientSynchronizer&) = delete;
  GradientSynchronizer& operator=(const GradientSynchronizer&) = delete;

  /// Call before each backward.
  void begin_step();
  /// Call after backward: launches what is left, waits, and leaves the mean over ranks in .grad.
  void finish();

  std::size_t bucket_count() const { return buckets_.size(); }
  /// Bytes of the flat buffers (one copy of the gradients).
  std::size_t buffer_bytes() const;
  /// Buckets all-reduced while backward was still running, in the last step.
  std::size_t launched_during_backward() const { return launched_early_; }

 private:
  struct Bucket {
    torch::Tensor flat;
    std::vector<std::size_t> params;  ///< indices into parameters_
    std::vector<std::int64_t> offsets;
    std::size_t ready = 0;
    bool launched = false;
    Communicator::Pending pending;
  };
  void on_gradient(std::size_t param, const torch::Tensor& grad);
  void launch_ready();  ///< launches consecutive complete buckets from next_launch_ (lock held)
  void launch(Bucket& b);

  std::vector<torch::Tensor> parameters_;
  std::vector<unsigned> hooks_;
  std::vector<std::size_t> bucket_of_, slot_of_;
  std::vector<char> has_grad_;
  std::vector<Bucket> buckets_;
  std::size_t next_launch_ = 0, launched_early_ = 0;
  bool in_backward_ = false;
  Communicator& comm_;
  std::mutex m_;
};

}  // namespace voxfit::dist
