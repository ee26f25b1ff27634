#pragma once
// Instance norm + affine + activation (+ a residual added before the activation) through one
// dispatch: voxfit's fused CUDA kernels where they apply (a CUDA build, a CUDA tensor of float,
// half or bfloat16, NCDHW or channels-last, `--kernels fused`), otherwise the ATen composition,
// which stays the reference and the only path on CPU and LibTorch 1.13 builds.
#include <torch/types.h>

#include <string>

namespace voxfit::kernels {

/// `aten`: the ATen reference everywhere; `fused`: voxfit's CUDA kernels where they apply.
enum class KernelMode { kAten, kFused };
/// "aten" | "fused"; throws ConfigError naming `what` otherwise.
KernelMode parse_kernel_mode(const std::string& text, const std::string& what = "--kernels");
std::string to_string(KernelMode mode);

/// The process-wide choice (as torch.backends.cudnn.enabled is): kFused unless set (it falls back to
/// ATen wherever the fused kernels do not apply). On every device it also selects the models'
/// cheaper equivalents (models::norm_cancels_conv_bias, SwinUNETR's to_windows).
KernelMode kernel_mode();
void set_kernel_mode(KernelMode mode);

/// Sets the mode for a scope (tests compare both paths on the same module).
class KernelModeGuard {
 public:
  explicit KernelModeGuard(KernelMode mode) : saved_(kernel_mode()) { set_kernel_mode(mode); }
  ~KernelModeGuard() { set_kernel_mode(saved_); }
  KernelModeGuard(const KernelModeGuard&) = delete;
  KernelModeGuard& operator=(const KernelModeGuard&) = delete;

 private:
  KernelMode saved_;
};

enum class Activation { kNone, kReLU, kLeakyReLU };

struct NormActSpec {
  Activation act = Activation::kNone;
  double slope = 0.01;  ///< LeakyReLU's negative slope (nnU-Net's and MONAI's 0.01)
  double eps = 1e-5;    ///< InstanceNorm's epsilon
};

/// act(instance_norm(x) * weight + bias + residual) over each sample's channel, statistics from
/// the input (as InstanceNorm without running stats). weight / bias: [C] or undefined (no affine);
/// residual: undefined or x's shape. Autograd flows to x, weight, bias and residual.
torch::Tensor instance_norm_act(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                const torch::Tensor& residual, const NormActSpec& spec);

/// The ATen composition (torch::instance_norm, add, in-place activation): the reference path.
torch::Tensor instance_norm_act_reference(const torch::Tensor& x, const torch::Tensor& weight,
                                          const torch::Tensor& bias, const torch::Tensor& residual,
                                          const NormActSpec& spec);

/// True where instance_norm_act runs the fused kernels for these arguments in the current mode.
bool fused_instance_norm_applies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& residual);

/// Batch norm's running statistics, as torch::nn::BatchNorm keeps them.
struct RunningStats {
  torch::Tensor mean, var;  ///< [C], updated in place in training; undefined where none are tracked
  double momentum = 0.1;    ///< the update's factor (BatchNorm's momentum, or 1 / batches seen without one)
};

/// act(batch_norm(x) * weight + bias + residual). In training (or without running statistics) the
/// statistics of each channel over the batch and the spatial axes, and the running statistics
/// updated with the batch's mean and unbiased variance; otherwise the running statistics. The
/// fused kernels run the training case on CUDA, NCDHW or channels-last: the batch's rows of each
/// channel are one of their instances (in NCDHW, the channel's plane in every sample).
torch::Tensor batch_norm_act(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                             const RunningStats& running, bool training, const torch::Tensor& residual,
                             const NormActSpec& spec);

/// The ATen composition (torch::batch_norm, add, in-place activation): the reference path.
torch::Tensor batch_norm_act_reference(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                       const RunningStats& running, bool training, const torch::Tensor& residual,
                                       const NormActSpec& spec);

/// The running statistics' update from a batch's per-channel mean and rstd = 1 / sqrt(var + eps)
/// over `rows` elements a channel, as ATen's batch norm makes it (the unbiased variance); nothing
/// where `running` tracks none. batch_norm_act's fused path calls it with the kernels' statistics.
void update_running_stats(const RunningStats& running, const torch::Tensor& mean, const torch::Tensor& rstd,
                          int64_t rows, double eps);

/// True where batch_norm_act runs the fused kernels for these arguments in the current mode.
bool fused_batch_norm_applies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& residual,
                              const RunningStats& running, bool training);

}  // namespace voxfit::kernels
