#include "voxfit/train/train_step.h"

#include <torch/torch.h>

#include <cstdio>
#include <string>

#include "voxfit/core/block_scope.h"
#include "voxfit/core/error.h"
#include "voxfit/core/torch_compat.h"

namespace voxfit::train {

namespace {

std::vector<torch::Tensor> trainable(models::NetworkImpl& net) {
  std::vector<torch::Tensor> out;
  for (const auto& p : net.parameters())
    if (p.requires_grad()) out.push_back(p);
  return out;
}

// to() keeps the weights' memory format, so a network built channels-last stays so.
models::Network on_device(models::Network net, torch::Device device) {
  net->to(device);
  return net;
}

LossScalerOptions scaler_options(LossScalerOptions o, Precision p) {
  o.enabled = uses_loss_scaling(p);
  return o;
}

}  // namespace

void check_precision_supported(Precision precision, torch::Device device) {
  if (precision == Precision::kFp16 && !device.is_cuda())
    throw UnsupportedError("--precision fp16 needs a CUDA device (LibTorch's CPU autocast has bf16 only)");
}

TrainStep::TrainStep(models::Network network, torch::Device device, StepOptions options, memory::MemoryTracker* tracker)
    : network_(on_device(std::move(network), device)),
      device_(device),
      options_(options),
      optimizer_(trainable(*network_), options.optimizer),
      scaler_(scaler_options(options.scaler, options.precision), device),
      tracker_(tracker) {
  check_precision_supported(options_.precision, device_);
  apply_math_mode(options_.precision);
}

data::Batch TrainStep::device_batch(const data::Batch& host_batch, std::int64_t index) const {
  // The batch's copy on the device. On the CPU a copy as well: the loader's batch is host memory
  // there too, and the copy is what a CPU budget charges, as a GPU's memory holds it.
  data::Batch batch = device_.is_cpu() ? data::Batch{host_batch.image.clone(), host_batch.label.clone()}
                                       : data::Batch{host_batch.image.to(device_, /*non_blocking=*/true),
                                                     host_batch.label.to(device_, /*non_blocking=*/true)};
  if (options_.spatial_augment)
    data::augment_spatial(batch, *options_.spatial_augment,
                          options_.seed * 1000003ull + static_cast<std::uint64_t>(index));
  if (options_.channels_last) batch.image = batch.image.contiguous(torch::MemoryFormat::ChannelsLast3d);
  return batch;
}

StepOutput TrainStep::run(const data::Batch& host_batch, double lr, std::int64_t index) {
  network_->train();
  const data::Batch batch = device_batch(host_batch, index);
  if (!use_graph(batch)) {
    ++eager_steps_;
    return compute(batch, lr, nullptr);
  }
  if (!graph_ && !capture(batch, lr)) {
    ++eager_steps_;
    return compute(batch, lr, nullptr);
  }
  torch::NoGradGuard no_grad;
  graph_batch_.image.copy_(batch.image, /*non_blocking=*/true);
  graph_batch_.label.copy_(batch.label, /*non_blocking=*/true);
  graph_lr_.fill_(lr);
  graph_->replay();
  // The graph rewrites its outputs at every replay; the loop keeps a window of them.
  return StepOutput{graph_out_.loss.clone(), graph_out_.found_inf.clone()};
}

bool TrainStep::use_graph(const data::Batch& batch) const {
  if (!options_.cuda_graph) return false;
  if (graph_)
    return batch.image.sizes() == graph_batch_.image.sizes() && batch.image.strides() == graph_batch_.image.strides() &&
           batch.label.sizes() == graph_batch_.label.sizes();
#if defined(VOXFIT_WITH_CUDA)
  return !graph_failed_ && device_.is_cuda() && sync_ == nullptr && optimizer_.capturable() &&
         eager_steps_ >= options_.graph_warmup_steps;
#else
  (void)batch;
  return false;
#endif
}

bool TrainStep::capture(const data::Batch& batch, double lr) {
#if defined(VOXFIT_WITH_CUDA)
  // Static buffers the graph reads; run() copies each step's batch and learning rate into them.
  graph_batch_ = data::Batch{batch.image.clone(at::MemoryFormat::Preserve), batch.label.clone()};
  graph_lr_ = torch::full({}, lr, torch::TensorOptions().dtype(torch::kFloat).device(device_));
  // The eager steps before have run cuDNN's autotuning and left the gradients dropped
  // (zero_grad), so the captured backward allocates them in the graph's pool, as every replay will.
  // Memory accounting reads the allocator around each block; a capture allocates from the graph's
  // pool and executes nothing, so it is not observed.
  core::BlockObserver* const observer = core::set_block_observer(nullptr);
  try {
    graph_ = core::capture_step([this] { graph_out_ = compute(graph_batch_, 0.0, &graph_lr_); }, device_.index(),
                                /*warmup_runs=*/0, /*release_cached=*/true, /*other_threads_free=*/true);
  } catch (const c10::Error& e) {
    // Something in the step cannot be captured. Nothing of the capture executed, but the gradients
    // it allocated are attached to the parameters: drop them and train eagerly from here on.
    graph_.reset();
    graph_failed_ = true;
    optimizer_.zero_grad();
    const std::string what = e.what_without_backtrace();
    std::fprintf(stderr, "voxfit: --cuda-graph: the training step could not be captured (%s); it runs eagerly\n",
                 what.substr(0, what.find('\n')).c_str());
  }
  core::set_block_observer(observer);
  return graph_ != nullptr;
#else
  (void)batch;
  (void)lr;
  return false;
#endif
}

StepOutput TrainStep::compute(const data::Batch& batch, double lr, const torch::Tensor* lr_on_device) {
  StepOutput out;
  // A captured step records no phases: the tracker's allocator queries are host calls.
  memory::MemoryTracker* tracker = lr_on_device ? nullptr : tracker_;
  std::optional<memory::MemoryTracker::PhaseScope> phase;
  if (tracker) phase.emplace(tracker->phase(memory::Phase::Forward));
  {
    compat::AutocastScope autocast(device_.type(), uses_autocast(options_.precision),
                                   autocast_dtype(options_.precision));
    const auto outputs = network_->forward(batch.image);
    out.loss = deep_supervision_loss(outputs, batch.label, options_.loss);
  }
  if (tracker) phase.emplace(tracker->phase(memory::Phase::Backward));
  if (sync_) sync_->begin_step();
  scaler_.scale_loss(out.loss).backward();
  if (sync_) sync_->finish();
  if (tracker) phase.emplace(tracker->phase(memory::Phase::OptimizerStep));
  const auto grads = optimizer_.gradients();
  scaler_.unscale(grads);
  optimizer_.clip_gradients();
  out.found_inf = scaler_.found_inf_tensor().clone();
  const auto found_inf = scaler_.enabled() ? scaler_.found_inf_tensor() : torch::Tensor();
  if (lr_on_device)
    optimizer_.step(*lr_on_device, found_inf);
  else
    optimizer_.step(lr, found_inf);
  scaler_.update();
  optimizer_.zero_grad();
  out.loss = out.loss.detach();
  return out;
}

std::vector<torch::Tensor> TrainStep::trainable_parameters() const { return trainable(*network_); }

torch::Tensor TrainStep::infer(const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  compat::AutocastScope autocast(device_.type(), uses_autocast(options_.precision), autocast_dtype(options_.precision));
  auto input = x.to(device_);
  if (options_.channels_last) input = input.contiguous(torch::MemoryFormat::ChannelsLast3d);
  return network_->forward(input).front().to(torch::kFloat);
}

}  // namespace voxfit::train
