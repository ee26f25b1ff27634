#pragma once
// The ResNet50 / ViT reference benchmark: the protocol behind the published RTX 3090 and A40
// numbers (../shared/reference/README.md), run on any registry network that classifies 2D images.
//
// One "iteration" is `steps` forward passes (or training steps) of `batch` images; iteration 0
// includes every warm-up (cuDNN algorithm search, CUDA-graph capture), as in the reference, so the
// steady state is the mean over iterations 1..N-1.
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "voxfit/models/network.h"

namespace voxfit::bench {

/// `float16` is pure half precision (weights and inputs, no autocast), as in the reference;
/// `bfloat16` the same in bfloat16 (not in the reference, which predates it).
enum class Precision { kFloat16, kFloat32, kBfloat16 };
/// The weights' and inputs' type for a precision.
torch::ScalarType dtype_of(Precision p);
/// `zeros` is the reference's input; `random` (normal noise) keeps sparsity-sensitive kernels honest.
enum class InputFill { kZeros, kRandom };

/// "float16" / "float32" / "bfloat16".
std::string to_string(Precision p);
/// Parses "float16" / "float32" / "bfloat16"; throws ConfigError naming `what` (e.g. "--precision").
Precision parse_precision(const std::string& text, const std::string& what = "--precision");
/// "zeros" / "random".
std::string to_string(InputFill f);
/// Parses "zeros" / "random"; throws ConfigError naming `what`.
InputFill parse_input_fill(const std::string& text, const std::string& what = "--input");

/// Everything the protocol lets a user change; the defaults are the reference's except where noted.
struct BenchOptions {
  /// A registry network whose task is 2D classification (resnet50, vit_base_patch16_224).
  std::string model = "resnet50";
  Precision precision = Precision::kFloat16;
  /// Forward + backward + SGD step on random class targets instead of inference.
  bool train = false;
  /// CUDA device or the CPU (the CPU runs float32 only).
  torch::Device device = torch::kCPU;
  int64_t batch = 64;  ///< images per step (>= 1)
  int64_t steps = 30;  ///< steps per iteration (>= 1); 64 x 30 = the reference's 1920 images
  int iterations = 5;  ///< >= 2: iteration 0 is warm-up, the rest make the steady state
  int64_t in_channels = 3;
  int64_t image_size = 224;  ///< square images, image_size x image_size
  int64_t num_classes = 1000;
  /// Not the reference's zeros: random input is the honest default for comparisons.
  InputFill input = InputFill::kRandom;
  /// TF32 for float32 matrix products (cuBLAS). On, as under the reference's PyTorch 1.9;
  /// PyTorch >= 1.12 defaults to off, so comparisons with today's Python tools set it off.
  bool tf32_matmul = true;
  /// TF32 for float32 cuDNN convolutions: on in every PyTorch version.
  bool tf32_cudnn = true;
  /// cuDNN times candidate convolution algorithms on first use (during iteration 0).
  bool cudnn_benchmark = true;
  /// Channels-last weights and input; nullopt = on for CUDA runs of convolutional networks (those
  /// whose 4-D weights hold most parameters), where cuDNN's NHWC kernels avoid layout transposes
  /// (see uses_channels_last).
  std::optional<bool> channels_last;
  /// Capture the whole inference step as one CUDA graph and replay it, removing per-kernel launch
  /// cost. Takes effect for CUDA inference only; training and the CPU always run eagerly.
  bool cuda_graph = true;
  /// Inference: fold BatchNorm into the convolutions (NetworkImpl::fold_for_inference), whose
  /// fused path then runs cuDNN's convolution + bias (+ add) + ReLU. The CLI sets it from
  /// `--kernels` (fused: on); off runs the network's modules as they are (the reference).
  bool fold_batch_norm = false;
  /// How transformer blocks compute attention (ViT); passed to the network's ModelContext.
  models::AttentionMode attention = models::AttentionMode::kAuto;
  /// SGD learning rate (momentum 0.9) for --train.
  double learning_rate = 0.01;
};

/// Throws ConfigError for values outside the protocol (batch, steps, iterations, sizes) and
/// UnsupportedError for what this build or device cannot run (CUDA on a CPU build, a missing GPU,
/// float16 on the CPU: LibTorch's CPU kernels lack half-precision convolutions in 1.13).
void validate(const BenchOptions& options);

/// Whether a run of `net` uses channels-last weights and input: the explicit choice, else on for
/// CUDA runs of a convolutional network (4-D weights hold most of its parameters).
bool uses_channels_last(const BenchOptions& options, const models::NetworkImpl& net);

/// Builds `options.model` from the registry for the protocol (its entry's defaults, with the
/// options' channels, classes, image size and attention), built channels-last when
/// uses_channels_last says so. Throws ConfigError for an unknown name or a network that is not a
/// 2D classifier.
models::Network make_bench_model(const BenchOptions& options);

struct IterationTiming {
  int index = 0;
  int64_t images = 0;    ///< batch x steps
  double seconds = 0.0;  ///< wall time between device synchronisations
  double images_per_s() const { return static_cast<double>(images) / seconds; }
};

struct BenchResult {
  BenchOptions options;
  bool channels_last = false;  ///< in effect (after resolving the automatic choice)
  bool cuda_graph = false;     ///< in effect
  bool folded = false;         ///< BatchNorm folded into the convolutions (in effect)
  std::string device_name;     ///< "NVIDIA H200", or "cpu"
  std::vector<IterationTiming> iterations;
  /// CUDA runs: the device's peak bytes over all iterations, warm-up included (allocated = live
  /// tensors, reserved = what the caching allocator held). Not measured on the CPU.
  std::optional<std::uint64_t> peak_allocated, peak_reserved;
  /// Mean of images/s over iterations 1..N-1 (iteration 0 holds the warm-up).
  double steady_images_per_s() const;
};

using IterationCallback = std::function<void(const IterationTiming&)>;

/// Runs the protocol on `net` (moved to the device and precision; left in eval or train mode).
/// `on_iteration` is called after each iteration, for streaming output.
BenchResult run_benchmark(const models::Network& net, const BenchOptions& options,
                          const IterationCallback& on_iteration = {});

}  // namespace voxfit::bench
