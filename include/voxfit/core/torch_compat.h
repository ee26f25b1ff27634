#pragma once
// The one place for differences between LibTorch 1.13 (Debian 12, CPU) and 2.x (CUDA builds).
// Everything else in voxfit calls these and never tests TORCH_VERSION itself.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/Device.h>
#include <torch/version.h>

#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#if defined(VOXFIT_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#define VOXFIT_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace voxfit::compat {

/// True where LibTorch has the public scaled_dot_product_attention (flash / memory-efficient on CUDA).
inline constexpr bool kHasPublicSdpa = VOXFIT_TORCH_AT_LEAST(2, 0);
/// True where LibTorch has the fused (multi-tensor, one kernel) AdamW for CUDA.
inline constexpr bool kHasFusedAdamW = VOXFIT_TORCH_AT_LEAST(2, 1);
/// True where the CUDA caching allocator can record a memory history (snapshots).
inline constexpr bool kHasMemoryHistory = VOXFIT_TORCH_AT_LEAST(2, 1);

/// Fused softmax(q k^T * scale + mask) v through LibTorch's kernel (q, k, v: [B, H, L, D]).
inline at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                               const std::optional<at::Tensor>& mask = std::nullopt) {
  c10::optional<at::Tensor> m;
  if (mask) m = *mask;
#if VOXFIT_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v, m, 0.0, false);
#else
  return std::get<0>(at::_scaled_dot_product_attention(q, k, v, m, 0.0, false, false));
#endif
}

/// True where this LibTorch's fused AdamW takes its learning rate as a device tensor, so that a
/// CUDA graph of the optimiser step can follow a schedule (2.2 and later).
constexpr bool kFusedAdamwTensorLr = VOXFIT_TORCH_AT_LEAST(2, 2);

/// LibTorch's fused AdamW over tensor lists (one CUDA kernel for all parameters); skips the update
/// where `found_inf` is non-zero. `lr`: a double, or a [] float32 tensor on the parameters' device
/// read when the kernel runs (kFusedAdamwTensorLr). Returns false (and does nothing) where this
/// LibTorch lacks the form asked for.
template <typename Lr>
inline bool fused_adamw(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                        at::TensorList exp_avg_sqs, at::TensorList steps, const Lr& lr, double beta1, double beta2,
                        double weight_decay, double eps, const c10::optional<at::Tensor>& found_inf) {
  constexpr bool tensor_lr = std::is_same_v<Lr, at::Tensor>;
  static_assert(tensor_lr || std::is_same_v<Lr, double>, "fused_adamw: lr is a double or a tensor");
#if VOXFIT_TORCH_AT_LEAST(2, 1)
  if constexpr (!tensor_lr || kFusedAdamwTensorLr) {
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, lr, beta1, beta2, weight_decay, eps,
                      /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/c10::nullopt, found_inf);
    return true;
  }
#endif
  (void)params, (void)grads, (void)exp_avgs, (void)exp_avg_sqs, (void)steps, (void)lr, (void)beta1;
  (void)beta2, (void)weight_decay, (void)eps, (void)found_inf;
  return false;
}

/// True where LibTorch has the fused (multi-tensor, one kernel) SGD for CUDA, with a tensor
/// learning rate, so that a CUDA graph can capture nnU-Net's optimiser step (2.4 and later).
inline constexpr bool kHasFusedSgd = VOXFIT_TORCH_AT_LEAST(2, 4);

/// LibTorch's fused SGD over tensor lists, PyTorch's update (weight decay added to the gradient,
/// buf = momentum * buf + grad, Nesterov's grad + momentum * buf; dampening 0) with a momentum
/// buffer that starts at zero, which with dampening 0 is the same as starting it at the first
/// gradient; skips the update where `found_inf` is non-zero. `lr`: a double or a [] float32 tensor on the parameters'
/// device. Returns false (and does nothing) where this LibTorch lacks it.
template <typename Lr>
inline bool fused_sgd(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers, const Lr& lr,
                      double momentum, double weight_decay, bool nesterov, const c10::optional<at::Tensor>& found_inf) {
  static_assert(std::is_same_v<Lr, at::Tensor> || std::is_same_v<Lr, double>, "fused_sgd: lr is a double or a tensor");
#if VOXFIT_TORCH_AT_LEAST(2, 4)
  at::_fused_sgd_(params, grads, momentum_buffers, weight_decay, momentum, lr, /*dampening=*/0.0, nesterov,
                  /*maximize=*/false, /*is_first_step=*/false, /*grad_scale=*/c10::nullopt, found_inf);
  return true;
#else
  (void)params, (void)grads, (void)momentum_buffers, (void)lr, (void)momentum, (void)weight_decay, (void)nesterov;
  (void)found_inf;
  return false;
#endif
}

/// Scales `tensors` in place so that their joint L2 norm is at most `max_norm`, without a host
/// sync: one multi-tensor norm and one multi-tensor multiply on LibTorch 2.1+, a loop before.
inline void clip_joint_norm_(at::TensorList tensors, double max_norm) {
  if (tensors.empty()) return;
  std::vector<at::Tensor> norms;
#if VOXFIT_TORCH_AT_LEAST(2, 1)
  norms = at::_foreach_norm(tensors);
#else
  for (const auto& t : tensors) norms.push_back(t.to(at::kFloat).norm());
#endif
  const auto total = at::stack(norms).to(at::kFloat).norm();
  const auto coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
#if VOXFIT_TORCH_AT_LEAST(2, 1)
  at::_foreach_mul_(tensors, coef);
#else
  for (const auto& t : tensors) t.mul_(coef.to(t.scalar_type()));
#endif
}

/// Turns autocast on or off for one device type and sets its dtype.
inline void set_autocast(c10::DeviceType device, bool enabled, at::ScalarType dtype) {
#if VOXFIT_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device, enabled);
  if (enabled) at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
    if (enabled) at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_cpu_enabled(enabled);
    if (enabled) at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

inline bool autocast_enabled(c10::DeviceType device) {
#if VOXFIT_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

/// The dtype autocast casts to on one device type (whether or not autocast is on there).
inline at::ScalarType autocast_dtype(c10::DeviceType device) {
#if VOXFIT_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                         : at::autocast::get_autocast_cpu_dtype();
#endif
}

/// Autocast for a scope, like Python's `with torch.autocast(...)`: restores the previous state and
/// clears the cast cache when the outermost scope ends.
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device, bool enabled, at::ScalarType dtype)
      : device_(device), was_enabled_(autocast_enabled(device)) {
    set_autocast(device, enabled, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set_autocast(device_, was_enabled_, at::kFloat);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  bool was_enabled_;
};

namespace detail {
template <class Event>
auto kineto_start_ns(const Event& e, int) -> decltype(static_cast<std::int64_t>(e.startNs())) {
  return static_cast<std::int64_t>(e.startNs());
}
template <class Event>
std::int64_t kineto_start_ns(const Event& e, long) {
  return static_cast<std::int64_t>(e.startUs()) * 1000;
}
template <class Event>
auto kineto_duration_ns(const Event& e, int) -> decltype(static_cast<std::int64_t>(e.durationNs())) {
  return static_cast<std::int64_t>(e.durationNs());
}
template <class Event>
std::int64_t kineto_duration_ns(const Event& e, long) {
  return static_cast<std::int64_t>(e.durationUs()) * 1000;
}
}  // namespace detail

/// A Kineto event's start and duration in nanoseconds: 1.13's KinetoEvent has startUs/durationUs,
/// 2.x's startNs/durationNs (detected by overload, not by version number).
template <class Event>
std::int64_t kineto_start_ns(const Event& e) {
  return detail::kineto_start_ns(e, 0);
}
template <class Event>
std::int64_t kineto_duration_ns(const Event& e) {
  return detail::kineto_duration_ns(e, 0);
}

#if defined(VOXFIT_WITH_CUDA)
namespace cuda_alloc = c10::cuda::CUDACachingAllocator;

/// The caching allocator's statistics for one device (the type was renamed in 2.x).
inline auto device_stats(int device) { return cuda_alloc::getDeviceStats(static_cast<c10::DeviceIndex>(device)); }
inline void reset_peak_stats(int device) { cuda_alloc::resetPeakStats(static_cast<c10::DeviceIndex>(device)); }
inline void reset_accumulated_stats(int device) {
  cuda_alloc::resetAccumulatedStats(static_cast<c10::DeviceIndex>(device));
}
inline void set_memory_fraction(double fraction, int device) {
  cuda_alloc::setMemoryFraction(fraction, static_cast<c10::DeviceIndex>(device));
}
#endif

}  // namespace voxfit::compat
