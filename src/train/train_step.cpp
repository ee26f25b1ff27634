#include "voxfit/train/train_step.h"

#include <torch/torch.h>

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

TrainStep::TrainStep(models::Network network, torch::Device device, StepOptions options,
                     memory::MemoryTracker* tracker)
    : network_(on_device(std::move(network), device)),
      device_(device),
      options_(options),
      optimizer_(trainable(*network_), options.optimizer),
      scaler_(scaler_options(options.scaler, options.precision), device),
      tracker_(tracker) {
  check_precision_supported(options_.precision, device_);
  apply_math_mode(options_.precision);
}

StepOutput TrainStep::run(const data::Batch& host_batch, double lr, std::int64_t index) {
  network_->train();
  // The batch's copy on the device. On the CPU a copy as well: the loader's batch is host memory
  // there too, and the copy is what a CPU budget charges, as a GPU's memory holds it.
  data::Batch batch = device_.is_cpu()
                          ? data::Batch{host_batch.image.clone(), host_batch.label.clone()}
                          : data::Batch{host_batch.image.to(device_, /*non_blocking=*/true),
                                        host_batch.label.to(device_, /*non_blocking=*/true)};
  if (options_.spatial_augment)
    data::augment_spatial(batch, *options_.spatial_augment,
                          options_.seed * 1000003ull + static_cast<std::uint64_t>(index));
  if (options_.channels_last) batch.image = batch.image.contiguous(torch::MemoryFormat::ChannelsLast3d);

  StepOutput out;
  std::optional<memory::MemoryTracker::PhaseScope> phase;
  if (tracker_) phase.emplace(tracker_->phase(memory::Phase::Forward));
  {
    compat::AutocastScope autocast(device_.type(), uses_autocast(options_.precision),
                                   autocast_dtype(options_.precision));
    const auto outputs = network_->forward(batch.image);
    out.loss = deep_supervision_loss(outputs, batch.label, options_.loss);
  }
  if (tracker_) phase.emplace(tracker_->phase(memory::Phase::Backward));
  if (sync_) sync_->begin_step();
  scaler_.scale_loss(out.loss).backward();
  if (sync_) sync_->finish();
  if (tracker_) phase.emplace(tracker_->phase(memory::Phase::OptimizerStep));
  const auto grads = optimizer_.gradients();
  scaler_.unscale(grads);
  optimizer_.clip_gradients();
  out.found_inf = scaler_.found_inf_tensor().clone();
  optimizer_.step(lr, scaler_.enabled() ? scaler_.found_inf_tensor() : torch::Tensor());
  scaler_.update();
  optimizer_.zero_grad();
  out.loss = out.loss.detach();
  return out;
}

std::vector<torch::Tensor> TrainStep::trainable_parameters() const { return trainable(*network_); }

torch::Tensor TrainStep::infer(const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  compat::AutocastScope autocast(device_.type(), uses_autocast(options_.precision),
                                 autocast_dtype(options_.precision));
  auto input = x.to(device_);
  if (options_.channels_last) input = input.contiguous(torch::MemoryFormat::ChannelsLast3d);
  return network_->forward(input).front().to(torch::kFloat);
}

}  // namespace voxfit::train
