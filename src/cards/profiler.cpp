#include "voxfit/cards/profiler.h"

#include <ATen/Context.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <set>

#include "voxfit/bench/benchmark.h"
#include "voxfit/core/error.h"
#include "voxfit/core/runtime.h"
#include "voxfit/core/torch_compat.h"
#include "voxfit/memory/card_table.h"
#include "voxfit/train/train_step.h"

namespace voxfit::cards {

namespace {

namespace kp = torch::autograd::profiler;
namespace pi = torch::profiler::impl;

// libkineto::ActivityType, stable in every Kineto LibTorch has shipped: CPU_OP = 0, GPU_MEMCPY = 3,
// GPU_MEMSET = 4, CONCURRENT_KERNEL = 5 (runtime calls and GPU-side annotations are left out).
constexpr std::uint8_t kCpuOp = 0, kGpuMemcpy = 3, kGpuMemset = 4, kKernel = 5;

void synchronize(int device) { torch::cuda::synchronize(device); }

std::string gpu_name(int device) {
  for (const GpuInfo& g : cuda_devices())
    if (g.index == device) return g.name;
  return "cuda:" + std::to_string(device);
}

/// The tensor arithmetic of a step at `precision` (bench or train names).
MathKind step_math(const std::string& precision, bool tf32_matmul) {
  if (precision == "fp16" || precision == "float16") return MathKind::kFp16Tensor;
  if (precision == "bf16" || precision == "bfloat16") return MathKind::kBf16Tensor;
  return tf32_matmul ? MathKind::kTf32 : MathKind::kFp32;
}

/// The card's dense GEMM rate for `math` (TFLOP/s): an 8192^3 matrix product, 3 untimed and 20
/// timed, the TF32 setting restored after.
double measure_gemm_tflops(int device, MathKind math) {
  constexpr std::int64_t n = 8192;
  constexpr int reps = 20;
  const auto dtype = math == MathKind::kFp16Tensor   ? torch::kHalf
                     : math == MathKind::kBf16Tensor ? torch::kBFloat16
                                                     : torch::kFloat;
  auto& context = at::globalContext();
  const bool tf32 = context.allowTF32CuBLAS();
  context.setAllowTF32CuBLAS(math == MathKind::kTf32);
  double seconds = 0;
  {
    torch::NoGradGuard no_grad;
    const auto options =
        torch::TensorOptions().dtype(dtype).device(torch::kCUDA, static_cast<c10::DeviceIndex>(device));
    const torch::Tensor a = torch::randn({n, n}, options), b = torch::randn({n, n}, options);
    torch::Tensor c = torch::mm(a, b);
    for (int i = 0; i < 3; ++i) torch::mm_out(c, a, b);
    synchronize(device);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) torch::mm_out(c, a, b);
    synchronize(device);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  context.setAllowTF32CuBLAS(tf32);
  return 2.0 * n * n * n * reps / seconds / 1e12;
}

bool is_reference_model(const std::string& model) {
  return models::find_model(model).task == models::TaskKind::kClassification2d;
}

// One step, ready to run repeatedly, and what the profile should say about it.
struct PreparedStep {
  std::function<void()> run;
  std::vector<std::int64_t> input_shape;
  std::string precision;
  bool tf32_matmul = false, tf32_cudnn = false, channels_last = false;
  // Set where the timed steps replay a CUDA graph: called before the profiled steps, it makes
  // them eager.
  std::function<void()> before_profile;
  std::function<bool()> graphed;  ///< whether the timed steps replayed a graph
  // Keeps the network, optimiser and tensors alive as long as `run`.
  std::shared_ptr<void> state;
};

PreparedStep prepare_reference(const ProfileOptions& o) {
  bench::BenchOptions b;
  b.model = o.model;
  b.precision = bench::parse_precision(o.precision, "--precision");
  b.train = o.train;
  b.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(o.device));
  b.batch = o.batch > 0 ? o.batch : 64;
  b.cuda_graph = false;
  b.attention = o.attention;
  b.tf32_matmul = o.tf32_matmul;
  b.channels_last = o.channels_last;
  bench::validate(b);
  auto& context = at::globalContext();
  context.setBenchmarkCuDNN(b.cudnn_benchmark);
  context.setAllowTF32CuBLAS(b.tf32_matmul);
  context.setAllowTF32CuDNN(b.tf32_cudnn);

  struct State {
    models::Network net;
    torch::Tensor images, targets, logits;
    std::unique_ptr<torch::optim::SGD> optimizer;
  };
  auto s = std::make_shared<State>();
  s->net = bench::make_bench_model(b);
  const bool channels_last = bench::uses_channels_last(b, *s->net);
  const auto dtype = bench::dtype_of(b.precision);
  s->net->to(b.device, dtype);
  if (channels_last) {
    torch::NoGradGuard no_grad;
    for (auto& p : s->net->parameters())
      if (p.dim() == 4) p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
  }
  s->net->train(b.train);
  const std::vector<std::int64_t> shape = {b.batch, b.in_channels, b.image_size, b.image_size};
  s->images = torch::randn(shape, torch::TensorOptions().dtype(dtype).device(b.device));
  if (channels_last) s->images = s->images.contiguous(at::MemoryFormat::ChannelsLast);

  PreparedStep step;
  step.input_shape = shape;
  step.precision = bench::to_string(b.precision);
  step.tf32_matmul = b.tf32_matmul;
  step.tf32_cudnn = b.tf32_cudnn;
  step.channels_last = channels_last;
  if (b.train) {
    s->optimizer = std::make_unique<torch::optim::SGD>(s->net->parameters(),
                                                       torch::optim::SGDOptions(b.learning_rate).momentum(0.9));
    s->targets =
        torch::randint(0, b.num_classes, {b.batch}, torch::TensorOptions().dtype(torch::kLong).device(b.device));
    State* st = s.get();
    step.run = [st] {
      st->optimizer->zero_grad();
      auto loss = torch::nn::functional::cross_entropy(st->net->forward(st->images).at(0), st->targets);
      loss.backward();
      st->optimizer->step();
    };
  } else {
    State* st = s.get();
    step.run = [st] {
      c10::InferenceMode inference;
      st->logits = st->net->forward(st->images).at(0);
    };
  }
  step.state = s;
  return step;
}

PreparedStep prepare_segmentation(const ProfileOptions& o) {
  const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(o.device));
  const train::Precision precision = train::parse_precision(o.precision);
  train::check_precision_supported(precision, device);
  models::ModelContext ctx = models::find_model(o.model).defaults;
  ctx.patch = o.patch;
  ctx.attention = o.attention;
  for (const auto& [name, value] : o.params) ctx.params[name] = value;
  ctx.channels_last = models::resolve_channels_last(models::find_model(o.model), o.channels_last, device);
  train::StepOptions so;
  so.precision = precision;
  so.channels_last = ctx.channels_last;
  so.cuda_graph = o.train && o.cuda_graph;
  struct State {
    std::unique_ptr<train::TrainStep> step;
    data::Batch batch;
    torch::Tensor out;
  };
  auto s = std::make_shared<State>();
  s->step = std::make_unique<train::TrainStep>(models::make_model(o.model, ctx), device, so);
  const std::int64_t b = o.batch > 0 ? o.batch : 2;
  std::vector<std::int64_t> shape = {b, ctx.in_channels};
  shape.insert(shape.end(), o.patch.begin(), o.patch.end());
  std::vector<std::int64_t> label_shape = shape;
  label_shape[1] = 1;
  s->batch.image = torch::randn(shape, torch::TensorOptions().device(device));
  s->batch.label =
      torch::randint(0, ctx.num_classes, label_shape, torch::TensorOptions().dtype(torch::kLong).device(device));

  PreparedStep step;
  step.input_shape = shape;
  step.precision = train::to_string(precision);
  // The train module's math mode: TF32 for matrix products and convolutions only at tf32.
  step.tf32_matmul = step.tf32_cudnn = precision == train::Precision::kTf32;
  step.channels_last = ctx.channels_last;
  State* st = s.get();
  if (o.train) {
    auto index = std::make_shared<std::int64_t>(0);
    step.run = [st, index] { st->step->run(st->batch, st->step->optimizer().options().lr, (*index)++); };
    if (so.cuda_graph) {
      step.before_profile = [st] { st->step->set_cuda_graph(false); };
      step.graphed = [st] { return st->step->graphed(); };
    }
  } else {
    st->step->network().eval();
    step.run = [st] {
      torch::NoGradGuard no_grad;
      st->out = st->step->infer(st->batch.image);
    };
  }
  step.state = s;
  return step;
}

}  // namespace

std::vector<TraceEvent> record_trace(const std::function<void()>& work, bool cuda) {
  const pi::ProfilerConfig config(pi::ProfilerState::KINETO, /*report_input_shapes=*/true, /*profile_memory=*/false,
                                  /*with_stack=*/false, /*with_flops=*/true, /*with_modules=*/false);
  std::set<pi::ActivityType> activities{pi::ActivityType::CPU};
  if (cuda) activities.insert(pi::ActivityType::CUDA);
  kp::prepareProfiler(config, activities);
  kp::enableProfiler(config, activities);
  std::unique_ptr<kp::ProfilerResult> result;
  try {
    work();
  } catch (...) {
    kp::disableProfiler();
    throw;
  }
  result = kp::disableProfiler();
  std::vector<TraceEvent> out;
  if (!result) return out;
  for (const auto& e : result->events()) {
    const std::uint8_t activity = e.activityType();
    TraceEvent t;
    if (e.deviceType() == c10::DeviceType::CUDA &&
        (activity == kKernel || activity == kGpuMemcpy || activity == kGpuMemset)) {
      t.on_device = true;
      t.kind = activity == kKernel ? "kernel" : (activity == kGpuMemcpy ? "memcpy" : "memset");
      t.linked_correlation = e.linkedCorrelationId();
    } else if (e.deviceType() == c10::DeviceType::CPU && activity == kCpuOp) {
      t.thread = e.startThreadId();
      t.correlation = e.correlationId();
      t.flops = e.flops();
      if (e.hasShapes())
        for (const auto& shape : e.shapes()) t.shapes.push_back(shape);
      if (e.hasTypes())
        for (const auto& type : e.dtypes()) t.dtypes.push_back(type);
    } else {
      continue;
    }
    t.name = e.name();
    t.start_ns = compat::kineto_start_ns(e);
    t.duration_ns = compat::kineto_duration_ns(e);
    out.push_back(std::move(t));
  }
  return out;
}

void validate(const ProfileOptions& o) {
  (void)models::find_model(o.model);  // ConfigError listing the known names
  if (o.batch < 0) throw ConfigError("cards profile: --batch must be >= 1, got " + std::to_string(o.batch));
  if (o.warmup_steps < 1 || o.timed_steps < 1 || o.profiled_steps < 1)
    throw ConfigError("cards profile: warm-up, timed and profiled steps must each be >= 1");
  if (is_reference_model(o.model)) {
    (void)bench::parse_precision(o.precision, "--precision");
    if (!o.params.empty())
      throw ConfigError("cards profile: " + o.model + " runs the benchmark protocol's architecture; '" +
                        o.params.begin()->first + "' applies to the segmentation models only");
  } else {
    (void)train::parse_precision(o.precision);
    if (o.patch.size() != 3) throw ConfigError("cards profile: --patch needs 3 sizes for " + o.model);
  }
  if (!cuda_available())
    throw UnsupportedError(
        "cards profile: profiling runs kernels on a CUDA GPU, and this build or machine has none "
        "(predict from saved profiles with: voxfit cards predict --profile FILE.json)");
  const auto n = static_cast<int>(cuda_devices().size());
  if (o.device < 0 || o.device >= n)
    throw ConfigError("cards profile: device " + std::to_string(o.device) + " does not exist (" + std::to_string(n) +
                      " CUDA device(s))");
}

KernelProfile profile_model(const ProfileOptions& o) {
  validate(o);
  const c10::DeviceGuard guard(torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(o.device)));
  PreparedStep step = is_reference_model(o.model) ? prepare_reference(o) : prepare_segmentation(o);

  // A graphed step captures after its eager warm-up steps (StepOptions::graph_warmup_steps, 3):
  // keep the capture out of the timed steps.
  const int warmup =
      step.graphed ? std::max(o.warmup_steps, train::StepOptions{}.graph_warmup_steps + 2) : o.warmup_steps;
  for (int i = 0; i < warmup; ++i) step.run();
  synchronize(o.device);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  for (int i = 0; i < o.timed_steps; ++i) step.run();
  synchronize(o.device);
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count() / o.timed_steps;
  const bool graphed = step.graphed && step.graphed();
  if (step.before_profile) step.before_profile();

  const std::vector<TraceEvent> events = record_trace(
      [&] {
        for (int i = 0; i < o.profiled_steps; ++i) step.run();
        synchronize(o.device);
      },
      true);

  KernelProfile p;
  p.model = o.model;
  p.precision = step.precision;
  p.train = o.train;
  p.batch = step.input_shape.front();
  p.input_shape = step.input_shape;
  p.device_name = gpu_name(o.device);
  p.torch_version = TORCH_VERSION;
  p.tf32_matmul = step.tf32_matmul;
  p.tf32_cudnn = step.tf32_cudnn;
  p.channels_last = step.channels_last;
  p.cuda_graph = graphed;
  p.attention = models::to_string(o.attention);
  p.profiled_steps = o.profiled_steps;
  p.wall_s_per_step = wall;
  AttributionOptions ao;
  ao.steps = o.profiled_steps;
  ao.tf32_matmul = step.tf32_matmul;
  ao.tf32_cudnn = step.tf32_cudnn;
  p.kernels = attribute_kernels(events, ao);
  if (p.kernels.empty())
    throw Error("cards profile: the profiler recorded no GPU kernels on cuda:" + std::to_string(o.device) +
                " (is CUPTI available to this LibTorch?)");
  // After the step's tensors: the GEMM's 400 MB-1.2 GB come from what the allocator already holds.
  p.gemm_math = step_math(p.precision, p.tf32_matmul);
  p.gemm_tflops = measure_gemm_tflops(o.device, p.gemm_math);
  return p;
}

}  // namespace voxfit::cards
