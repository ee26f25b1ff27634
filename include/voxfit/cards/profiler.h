#pragma once
// Profiles one network step on a CUDA GPU with LibTorch's Kineto profiler (CPU operators with
// input shapes and FLOPs, CUDA kernels) and turns the trace into a KernelProfile. The reference
// models (resnet50, vit_base_patch16_224) run the bench protocol (pure half for float16, TF32 on
// for float32, channels-last for convolutional nets, cuDNN benchmark) but eagerly, without a CUDA
// graph, as the published cards ran them; the segmentation models run a training step (or
// inference) of the train module at a patch and batch.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "voxfit/cards/kernel_attribution.h"
#include "voxfit/cards/kernel_profile.h"
#include "voxfit/models/network.h"

namespace voxfit::cards {

struct ProfileOptions {
  std::string model = "resnet50";
  /// float16 / float32 for the reference models; fp16, fp32, tf32, bf16 (or the float names) for
  /// the segmentation models.
  std::string precision = "float16";
  bool train = false;
  std::int64_t batch = 0;                       ///< 0: 64 for the reference models, 2 for segmentation
  std::vector<std::int64_t> patch{96, 96, 96};  ///< segmentation models only
  int device = 0;                               ///< CUDA device index
  int warmup_steps = 10;                        ///< untimed (cuDNN autotuning, allocator)
  int timed_steps = 30;                         ///< wall time, without the profiler
  int profiled_steps = 5;                       ///< under the profiler
  models::AttentionMode attention = models::AttentionMode::kAuto;
  bool tf32_matmul = true;  ///< reference models, float32: TF32 matrix products (PyTorch 1.9's default)
  /// Reference models: channels-last layout on or off; unset: the bench's automatic choice (on for
  /// convolutional nets on CUDA). timm's benchmark, and so the published card numbers, ran NCHW.
  std::optional<bool> channels_last;
  /// Segmentation training: the timed steps replay the whole step as one CUDA graph, as `voxfit
  /// train` runs it (the profiled steps stay eager: a replay shows the profiler no operators to
  /// attribute kernels and FLOPs to). Segmentation models take `channels_last` too (unset: as
  /// `voxfit train` resolves auto on CUDA, models::resolve_channels_last).
  bool cuda_graph = true;
  /// Architecture parameters by registry name (e.g. "deep_supervision" -> "false"), as `train` takes them.
  std::map<std::string, std::string> params;
};

/// Throws ConfigError for bad values and UnsupportedError without a CUDA device.
void validate(const ProfileOptions& options);

/// Runs the profile. UnsupportedError when this build or machine has no CUDA device.
KernelProfile profile_model(const ProfileOptions& options);

/// Runs `work` under the Kineto profiler (CPU operators with shapes and FLOPs; CUDA kernels when
/// `cuda`) and returns its events in a version-independent form. Exposed for tests (CPU operators
/// are recorded on every build).
std::vector<TraceEvent> record_trace(const std::function<void()>& work, bool cuda);

}  // namespace voxfit::cards
