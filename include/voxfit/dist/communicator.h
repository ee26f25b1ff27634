#pragma once
// Collectives between the ranks of a data-parallel job, on LibTorch's own c10d process groups:
// NCCL for CUDA tensors, Gloo for CPU tensors, after a rendezvous through c10d's TCPStore hosted
// by rank 0 at MASTER_ADDR:MASTER_PORT. The c10d headers stay in the .cpp (their base class moved
// from ProcessGroup to Backend between LibTorch 1.13 and 2.x).
#include <torch/types.h>

#include <chrono>
#include <memory>
#include <vector>

#include "voxfit/dist/rank.h"

namespace voxfit::dist {

/// Whether this build can make a process group for `device` (Gloo headers for the CPU, NCCL for CUDA).
bool backend_available(const torch::Device& device);
/// "gloo" or "nccl".
std::string backend_name(const torch::Device& device);

class Communicator {
 public:
  /// Joins the job `info` describes (blocks until every rank has joined or `timeout` passes).
  /// Throws UnsupportedError when this build lacks the backend, Error when the rendezvous fails.
  Communicator(const RankInfo& info, const torch::Device& device,
               std::chrono::milliseconds timeout = std::chrono::minutes(5));
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  const RankInfo& info() const;
  int rank() const { return info().rank; }
  int world_size() const { return info().world_size; }
  const torch::Device& device() const;

  /// An all-reduce in flight; wait() makes its result visible (CUDA: to the current stream).
  class Pending {
   public:
    Pending();
    ~Pending();
    Pending(Pending&&) noexcept;
    Pending& operator=(Pending&&) noexcept;
    void wait();
    bool active() const;

   private:
    friend class Communicator;
    struct Impl;
    std::unique_ptr<Impl> impl_;
  };

  /// Sums `tensor` (dense, contiguous, on this communicator's device) over all ranks, in place,
  /// asynchronously. Every rank must issue the same collectives in the same order.
  Pending all_reduce_sum(torch::Tensor& tensor);
  /// Copies `root`'s tensors to every rank, in place; waits.
  void broadcast(std::vector<torch::Tensor>& tensors, int root = 0);
  /// Sums a host value over the ranks (a blocking collective).
  double sum(double value);
  /// Largest of a host value over the ranks.
  double max(double value);
  /// Returns when every rank has called it.
  void barrier();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace voxfit::dist
