#include "voxfit/bench/benchmark.h"

#include <ATen/Context.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/InferenceMode.h>
#include <torch/cuda.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <chrono>
#include <memory>

#include "voxfit/core/error.h"
#include "voxfit/core/runtime.h"
#include "voxfit/memory/memory_tracker.h"

#if defined(VOXFIT_WITH_CUDA)
#include "voxfit/core/cuda_graph.h"
#endif

namespace voxfit::bench {

namespace {

#if defined(VOXFIT_WITH_CUDA)
// Eager runs before capture: the first fills cuDNN's algorithm cache, the next ones settle the
// allocator so the captured run allocates from a steady pool (PyTorch's examples use 3).
constexpr int kGraphWarmupRuns = 3;
#endif

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

bool convolution_dominated(const models::NetworkImpl& net) {
  int64_t conv = 0, all = 0;
  for (const auto& p : net.parameters()) {
    all += p.numel();
    if (p.dim() == 4) conv += p.numel();
  }
  return 2 * conv > all;
}

void to_channels_last(models::NetworkImpl& net) {
  torch::NoGradGuard no_grad;
  for (auto& p : net.parameters())
    if (p.dim() == 4) p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
}

std::string device_name(const torch::Device& device) {
  if (!device.is_cuda()) return "cpu";
  for (const GpuInfo& g : cuda_devices())
    if (g.index == device.index()) return g.name;
  return "cuda:" + std::to_string(device.index());
}

}  // namespace

std::string to_string(Precision p) {
  return p == Precision::kFloat16 ? "float16" : p == Precision::kBfloat16 ? "bfloat16" : "float32";
}

torch::ScalarType dtype_of(Precision p) {
  return p == Precision::kFloat16 ? torch::kHalf : p == Precision::kBfloat16 ? torch::kBFloat16 : torch::kFloat;
}

Precision parse_precision(const std::string& text, const std::string& what) {
  // The protocol's names first; fp16 / half / bf16 / fp32 mean the same pure dtypes here.
  if (text == "float16" || text == "fp16" || text == "half") return Precision::kFloat16;
  if (text == "float32" || text == "fp32") return Precision::kFloat32;
  if (text == "bfloat16" || text == "bf16") return Precision::kBfloat16;
  if (text == "16-mixed" || text == "bf16-mixed")
    throw ConfigError(what + ": " + text +
                      " is mixed precision (autocast); the reference protocol runs pure "
                      "float16 / bfloat16 (model.half()), or use --train on a segmentation model with fp16 / bf16");
  throw ConfigError(what + ": expected float16 (fp16), bfloat16 (bf16) or float32 (fp32), got '" + text + "'");
}

std::string to_string(InputFill f) { return f == InputFill::kZeros ? "zeros" : "random"; }

InputFill parse_input_fill(const std::string& text, const std::string& what) {
  if (text == "zeros") return InputFill::kZeros;
  if (text == "random") return InputFill::kRandom;
  throw ConfigError(what + ": expected zeros or random, got '" + text + "'");
}

void validate(const BenchOptions& o) {
  const auto positive = [](int64_t v, const char* name) {
    if (v < 1) throw ConfigError(std::string("bench: ") + name + " must be >= 1, got " + std::to_string(v));
  };
  positive(o.batch, "--batch");
  positive(o.steps, "--steps");
  positive(o.in_channels, "in_channels");
  positive(o.image_size, "image_size");
  positive(o.num_classes, "num_classes");
  if (o.iterations < 2)
    throw ConfigError("bench: --iterations must be >= 2 (iteration 0 is warm-up), got " + std::to_string(o.iterations));
  if (!(o.learning_rate > 0.0)) throw ConfigError("bench: learning_rate must be > 0");
  if (o.device.is_cuda()) {
    if (!cuda_available())
      throw UnsupportedError("bench: device " + o.device.str() + " requested, but there is no CUDA device (" +
                             no_gpu_reason() + ")");
    const auto n = static_cast<int>(cuda_devices().size());
    if (o.device.index() < 0 || o.device.index() >= n)
      throw ConfigError("bench: device " + std::to_string(o.device.index()) + " does not exist (" + std::to_string(n) +
                        " CUDA device(s))");
  } else if (!o.device.is_cpu()) {
    throw ConfigError("bench: device must be a CUDA device or the CPU, not " + o.device.str());
  }
  if (o.device.is_cpu() && o.precision != Precision::kFloat32)
    throw UnsupportedError("bench: " + to_string(o.precision) +
                           " runs on CUDA devices only (LibTorch's CPU kernels lack half-precision "
                           "convolutions); use --precision float32 on the CPU");
}

bool uses_channels_last(const BenchOptions& o, const models::NetworkImpl& net) {
  return o.channels_last.value_or(o.device.is_cuda() && convolution_dominated(net));
}

double BenchResult::steady_images_per_s() const {
  if (iterations.size() < 2) return 0.0;
  double sum = 0.0;
  for (std::size_t i = 1; i < iterations.size(); ++i) sum += iterations[i].images_per_s();
  return sum / static_cast<double>(iterations.size() - 1);
}

BenchResult run_benchmark(const models::Network& net, const BenchOptions& o, const IterationCallback& on_iteration) {
  validate(o);
  c10::DeviceGuard device_guard(o.device);
  auto& context = at::globalContext();
  context.setBenchmarkCuDNN(o.cudnn_benchmark);
  context.setAllowTF32CuBLAS(o.tf32_matmul);
  context.setAllowTF32CuDNN(o.tf32_cudnn);

  BenchResult result;
  result.options = o;
  result.device_name = device_name(o.device);
  result.channels_last = uses_channels_last(o, *net);
  result.cuda_graph = o.cuda_graph && o.device.is_cuda() && !o.train;

  const auto dtype = dtype_of(o.precision);
  net->to(o.device, dtype);
  if (result.channels_last) to_channels_last(*net);
  net->train(o.train);
  result.folded = o.fold_batch_norm && !o.train && net->fold_for_inference();

  // Built once in device memory before timing, as in the reference: no I/O in the loop.
  const auto image_options = torch::TensorOptions().dtype(dtype).device(o.device);
  const std::vector<int64_t> shape = {o.batch, o.in_channels, o.image_size, o.image_size};
  torch::Tensor images =
      o.input == InputFill::kZeros ? torch::zeros(shape, image_options) : torch::randn(shape, image_options);
  if (result.channels_last) images = images.contiguous(at::MemoryFormat::ChannelsLast);

  std::function<void()> step;
  std::unique_ptr<torch::optim::SGD> optimizer;
  torch::Tensor targets, logits;
  std::optional<c10::InferenceMode> inference;
  if (o.train) {
    optimizer =
        std::make_unique<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(o.learning_rate).momentum(0.9));
    targets = torch::randint(0, o.num_classes, {o.batch}, torch::TensorOptions().dtype(torch::kLong).device(o.device));
    step = [&] {
      optimizer->zero_grad();
      auto loss = torch::nn::functional::cross_entropy(net->forward(images).at(0), targets);
      loss.backward();
      optimizer->step();
    };
  } else {
    inference.emplace();
    // `logits` outlives each step so a captured graph's output buffer stays allocated.
    step = [&] { logits = net->forward(images).at(0); };
  }

#if defined(VOXFIT_WITH_CUDA)
  std::unique_ptr<core::CapturedStep> graph;
  if (result.cuda_graph) {
    const auto eager = step;
    // Captured lazily inside iteration 0, so the reference's "iteration 0 includes warm-up" holds.
    step = [&graph, eager, &o] {
      if (!graph) graph = core::capture_step(eager, o.device.index(), kGraphWarmupRuns);
      graph->replay();
    };
  }
#endif

  using Clock = std::chrono::steady_clock;
  synchronize(o.device);
  std::optional<memory::MemoryTracker> tracker;
  if (o.device.is_cuda()) {
    tracker.emplace(o.device);
    tracker->reset();
  }
  for (int i = 0; i < o.iterations; ++i) {
    const auto start = Clock::now();
    for (int64_t s = 0; s < o.steps; ++s) step();
    synchronize(o.device);
    IterationTiming it;
    it.index = i;
    it.images = o.batch * o.steps;
    it.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    result.iterations.push_back(it);
    if (on_iteration) on_iteration(it);
  }
  if (tracker) {
    const auto profile = tracker->profile();
    result.peak_allocated = profile.peak_allocated;
    result.peak_reserved = profile.peak_reserved;
  }
  return result;
}

}  // namespace voxfit::bench
