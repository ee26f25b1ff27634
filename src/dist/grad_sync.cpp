#include "voxfit/dist/grad_sync.h"

#include "voxfit/core/error.h"

namespace voxfit::dist {

GradientSynchronizer::GradientSynchronizer(std::vector<torch::Tensor> parameters, Communicator& comm,
                                           std::size_t bucket_bytes)
    : parameters_(std::move(parameters)), comm_(comm) {
  const std::size_t n = parameters_.size();
  bucket_of_.assign(n, 0);
  slot_of_.assign(n, 0);
  has_grad_.assign(n, 0);
  // Reverse order: the last layers' gradients come first in backward.
  std::size_t bytes = 0;
  for (std::size_t k = n; k-- > 0;) {
    const auto& p = parameters_[k];
    if (!p.requires_grad()) throw Error("gradient synchronizer: parameter " + std::to_string(k) + " needs no grad");
    if (p.device() != comm.device())
      throw Error("gradient synchronizer: parameter on " + p.device().str() + ", process group on " +
                  comm.device().str());
    const auto size = static_cast<std::size_t>(p.numel() * p.element_size());
    const bool new_bucket = buckets_.empty() || bytes + size > bucket_bytes ||
                            parameters_[buckets_.back().params.front()].scalar_type() != p.scalar_type();
    if (new_bucket) {
      buckets_.emplace_back();
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    bucket_of_[k] = buckets_.size() - 1;
    slot_of_[k] = b.params.size();
    b.offsets.push_back(b.params.empty() ? 0 : b.offsets.back() + parameters_[b.params.back()].numel());
    b.params.push_back(k);
    bytes += size;
  }
  for (auto& b : buckets_) {
    const auto& last = parameters_[b.params.back()];
    b.flat = torch::zeros({b.offsets.back() + last.numel()}, last.options().requires_grad(false));
  }
  for (std::size_t k = 0; k < n; ++k)
    hooks_.push_back(parameters_[k].register_hook([this, k](const torch::Tensor& g) { on_gradient(k, g); }));
}

GradientSynchronizer::~GradientSynchronizer() {
  for (std::size_t k = 0; k < hooks_.size(); ++k) parameters_[k].remove_hook(hooks_[k]);
}

std::size_t GradientSynchronizer::buffer_bytes() const {
  std::size_t s = 0;
  for (const auto& b : buckets_) s += static_cast<std::size_t>(b.flat.numel() * b.flat.element_size());
  return s;
}

void GradientSynchronizer::begin_step() {
  std::lock_guard<std::mutex> lock(m_);
  for (auto& b : buckets_) {
    if (b.pending.active()) b.pending.wait();
    b.ready = 0;
    b.launched = false;
  }
  std::fill(has_grad_.begin(), has_grad_.end(), 0);
  next_launch_ = 0;
  launched_early_ = 0;
  in_backward_ = true;
}

void GradientSynchronizer::on_gradient(std::size_t k, const torch::Tensor& grad) {
  std::lock_guard<std::mutex> lock(m_);
  if (!in_backward_) return;  // a backward outside training (e.g. a gradient check): not ours
  Bucket& b = buckets_[bucket_of_[k]];
  const auto slot = slot_of_[k];
  auto view = b.flat.narrow(0, b.offsets[slot], parameters_[k].numel()).view(parameters_[k].sizes());
  if (has_grad_[k]) {  // a second gradient for the same parameter in one backward
    if (b.launched)
      throw Error("gradient synchronizer: parameter " + std::to_string(k) +
                  " received a gradient after its bucket was reduced (a parameter used twice?)");
    view.add_(grad);
    return;
  }
  view.copy_(grad);
  has_grad_[k] = 1;
  if (++b.ready == b.params.size()) launch_ready();
}

void GradientSynchronizer::launch(Bucket& b) {
  // Pre-divided: the sum over ranks is then the mean, with one pass less after the wait.
  b.flat.div_(static_cast<double>(comm_.world_size()));
  b.pending = comm_.all_reduce_sum(b.flat);
  b.launched = true;
}

void GradientSynchronizer::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].ready == buckets_[next_launch_].params.size()) {
    launch(buckets_[next_launch_++]);
    ++launched_early_;
  }
}

void GradientSynchronizer::finish() {
  std::lock_guard<std::mutex> lock(m_);
  in_backward_ = false;
  for (; next_launch_ < buckets_.size(); ++next_launch_) {
    Bucket& b = buckets_[next_launch_];
    for (std::size_t s = 0; s < b.params.size(); ++s)
      if (!has_grad_[b.params[s]]) b.flat.narrow(0, b.offsets[s], parameters_[b.params[s]].numel()).zero_();
    launch(b);
  }
  for (auto& b : buckets_) {
    b.pending.wait();
    for (std::size_t s = 0; s < b.params.size(); ++s) {
      auto& p = parameters_[b.params[s]];
      if (!has_grad_[b.params[s]]) continue;
      const auto mean = b.flat.narrow(0, b.offsets[s], p.numel()).view(p.sizes());
      p.grad().copy_(mean);
    }
  }
}

}  // namespace voxfit::dist
