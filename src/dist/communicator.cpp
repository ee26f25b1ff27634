#include "voxfit/dist/communicator.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>

#if defined(VOXFIT_WITH_GLOO)
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if defined(VOXFIT_WITH_NCCL)
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "voxfit/core/error.h"

namespace voxfit::dist {

bool backend_available(const torch::Device& device) {
#if defined(VOXFIT_WITH_NCCL)
  if (device.is_cuda()) return true;
#endif
#if defined(VOXFIT_WITH_GLOO)
  if (device.is_cpu()) return true;
#endif
  return false;
}

std::string backend_name(const torch::Device& device) { return device.is_cuda() ? "nccl" : "gloo"; }

struct Communicator::Pending::Impl {
  c10::intrusive_ptr<c10d::Work> work;
};

Communicator::Pending::Pending() = default;
Communicator::Pending::~Pending() = default;
Communicator::Pending::Pending(Pending&&) noexcept = default;
Communicator::Pending& Communicator::Pending::operator=(Pending&&) noexcept = default;
bool Communicator::Pending::active() const { return impl_ && impl_->work; }

void Communicator::Pending::wait() {
  if (!active()) return;
  try {
    impl_->work->wait();
  } catch (const std::exception& e) {
    impl_->work.reset();
    throw Error(std::string("all-reduce failed (another rank died or timed out?): ") + e.what());
  }
  impl_->work.reset();
}

struct Communicator::Impl {
  RankInfo info;
  torch::Device device = torch::kCPU;
  c10::intrusive_ptr<c10d::Store> store;
#if defined(VOXFIT_WITH_GLOO)
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
#endif
#if defined(VOXFIT_WITH_NCCL)
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;
#endif

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& t, const c10d::AllreduceOptions& o) {
#if defined(VOXFIT_WITH_NCCL)
    if (nccl) return nccl->allreduce(t, o);
#endif
#if defined(VOXFIT_WITH_GLOO)
    if (gloo) return gloo->allreduce(t, o);
#endif
    throw UnsupportedError("no process group");
  }
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& t, const c10d::BroadcastOptions& o) {
#if defined(VOXFIT_WITH_NCCL)
    if (nccl) return nccl->broadcast(t, o);
#endif
#if defined(VOXFIT_WITH_GLOO)
    if (gloo) return gloo->broadcast(t, o);
#endif
    throw UnsupportedError("no process group");
  }
  double reduce(double value, c10d::ReduceOp op) {
    std::vector<at::Tensor> t{torch::full({1}, value, torch::TensorOptions().dtype(torch::kDouble).device(device))};
    c10d::AllreduceOptions o;
    o.reduceOp = op;
    allreduce(t, o)->wait();
    return t[0].item<double>();
  }
};

Communicator::Communicator(const RankInfo& info, const torch::Device& device, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  impl_->info = info;
  impl_->device = device;
  if (!backend_available(device))
    throw UnsupportedError("data-parallel training on " + device.str() + ": this build of voxfit has no " +
                           backend_name(device) + " process group (see README, building)");
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(info.master_port);
    so.isServer = info.rank == 0;
    so.numWorkers = static_cast<std::size_t>(info.world_size);
    so.waitWorkers = true;
    so.timeout = timeout;
    impl_->store = c10::make_intrusive<c10d::TCPStore>(info.master_addr, so);
#if defined(VOXFIT_WITH_NCCL)
    if (device.is_cuda()) {
      c10::cuda::set_device(device.index() < 0 ? 0 : device.index());
      auto options = c10d::ProcessGroupNCCL::Options::create();
      options->timeout = timeout;
      impl_->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl_->store, info.rank, info.world_size, options);
    }
#endif
#if defined(VOXFIT_WITH_GLOO)
    if (device.is_cpu()) {
      auto options = c10d::ProcessGroupGloo::Options::create();
      options->timeout = timeout;
      const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
      const bool loopback = info.master_addr == "localhost" || info.master_addr.rfind("127.", 0) == 0;
      options->devices.push_back(ifname && *ifname ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                                 : loopback        ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                                   : c10d::ProcessGroupGloo::createDefaultDevice());
      impl_->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, info.rank, info.world_size, options);
    }
#endif
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (const auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    throw Error("rank " + std::to_string(info.rank) + " of " + std::to_string(info.world_size) + ": rendezvous at " +
                info.master_addr + ":" + std::to_string(info.master_port) + " failed: " + what);
  }
}

Communicator::~Communicator() = default;

const RankInfo& Communicator::info() const { return impl_->info; }
const torch::Device& Communicator::device() const { return impl_->device; }

Communicator::Pending Communicator::all_reduce_sum(torch::Tensor& tensor) {
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  Pending p;
  p.impl_ = std::make_unique<Pending::Impl>();
  p.impl_->work = impl_->allreduce(tensors, o);
  return p;
}

void Communicator::broadcast(std::vector<torch::Tensor>& tensors, int root) {
  c10d::BroadcastOptions o;
  o.rootRank = root;
  o.rootTensor = 0;
  for (auto& t : tensors) {
    // One tensor per call (c10d's one-device-per-process form); a dense copy for other layouts.
    const bool dense = t.is_contiguous();
    std::vector<at::Tensor> one{dense ? t : t.contiguous()};
    impl_->broadcast(one, o)->wait();
    if (!dense) t.copy_(one[0]);
  }
}

double Communicator::sum(double value) { return impl_->reduce(value, c10d::ReduceOp::SUM); }
double Communicator::max(double value) { return impl_->reduce(value, c10d::ReduceOp::MAX); }
void Communicator::barrier() { (void)sum(0.0); }

}  // namespace voxfit::dist
