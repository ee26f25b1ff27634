#include "voxfit/kernels/depthwise_conv.h"

#include <torch/torch.h>

#include "voxfit/core/torch_compat.h"
#include "voxfit/kernels/instance_norm_act.h"  // kernel_mode

#ifdef VOXFIT_WITH_CUDA
#include "depthwise_conv_fused.h"
#endif

namespace voxfit::kernels {

namespace {
// What conv3d's autocast rule does to its input: the autocast dtype where CUDA autocast is on.
torch::Tensor autocast_input(const torch::Tensor& x) {
  if (!x.is_cuda() || !compat::autocast_enabled(c10::DeviceType::CUDA) || !at::isFloatingType(x.scalar_type()))
    return x;
  return x.to(compat::autocast_dtype(c10::DeviceType::CUDA));
}
}  // namespace

torch::Tensor depthwise_conv3d_reference(const torch::Tensor& x, const torch::Tensor& weight,
                                         const torch::Tensor& bias) {
  const int64_t k = weight.size(2);
  return torch::conv3d(x, weight, bias, /*stride=*/1, /*padding=*/k / 2, /*dilation=*/1, /*groups=*/x.size(1));
}

#ifdef VOXFIT_WITH_CUDA
namespace {
// The check on the input as the kernels would see it (already cast).
bool fused_applies_to_cast(const torch::Tensor& cast_x, const torch::Tensor& weight) {
  return kernel_mode() == KernelMode::kFused && fused_depthwise_conv3d_supports(cast_x, weight);
}
}  // namespace
#endif

bool fused_depthwise_conv3d_applies(const torch::Tensor& x, const torch::Tensor& weight) {
#ifdef VOXFIT_WITH_CUDA
  return fused_applies_to_cast(autocast_input(x), weight);
#else
  (void)x;
  (void)weight;
  return false;
#endif
}

torch::Tensor depthwise_conv3d(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
#ifdef VOXFIT_WITH_CUDA
  // One cast, shared by the check and the kernels (the check alone would copy the input once more).
  if (const auto cast_x = autocast_input(x); fused_applies_to_cast(cast_x, weight))
    return depthwise_conv3d_fused(cast_x, weight, bias);
#endif
  return depthwise_conv3d_reference(x, weight, bias);
}

}  // namespace voxfit::kernels
