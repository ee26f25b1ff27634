#pragma once
// A kernel profile: what one training or inference step of a network ran on a GPU, kernel by
// kernel, with the operator each kernel belongs to and that operator's FLOPs and bytes. It is the
// only input of the throughput prediction (besides the card table), so it is a file
// (profile.json) that can be taken on one machine and predicted from on another.
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace voxfit::cards {

/// The arithmetic a kernel's FLOPs run on, which picks the card's peak rate.
enum class MathKind {
  kFp16Tensor,  ///< float16 matrix products and convolutions on tensor cores (FP32 accumulate)
  kBf16Tensor,  ///< bfloat16 on tensor cores
  kTf32,        ///< float32 matrix products / convolutions with TF32 allowed
  kFp32,        ///< everything else: CUDA-core float32 arithmetic (elementwise, reductions, strict fp32)
};
std::string to_string(MathKind kind);
/// Parses to_string's names; throws IoError naming `where` otherwise.
MathKind parse_math_kind(const std::string& text, const std::string& where);

/// One kernel (or memcpy / memset) of a step, aggregated over identical launches: same kernel
/// name, same operator, same FLOPs and bytes.
struct KernelRecord {
  std::string name;      ///< the GPU kernel's name as CUPTI reports it
  std::string kind;      ///< "kernel", "memcpy" or "memset"
  std::string op;        ///< the CPU operator that launched it ("aten::cudnn_convolution"), or "" if none
  std::string flops_op;  ///< the operator the FLOPs and bytes were taken from (the op or an ancestor)
  MathKind math = MathKind::kFp32;
  std::int64_t calls = 0;  ///< launches per step (may be fractional over steps: rounded)
  double time_us = 0;      ///< summed duration of the launches, per step (microseconds)
  double flops = 0;        ///< floating-point operations of the launches, per step
  double bytes = 0;        ///< DRAM bytes of the launches (inputs + output estimate), per step
  /// FLOPs per byte; 0 when unknown (treated as memory bound).
  double intensity() const { return bytes > 0 ? flops / bytes : 0.0; }
};

/// Everything a prediction needs to know about a profiled step.
struct KernelProfile {
  static constexpr int kVersion = 1;
  std::string model;                      ///< registry name
  std::string precision;                  ///< "float16"/"float32" (benchmark models) or "fp16"/"fp32"/"tf32"/"bf16"
  bool train = false;                     ///< a training step (forward, backward, optimiser) rather than inference
  std::int64_t batch = 0;                 ///< samples per step
  std::vector<std::int64_t> input_shape;  ///< [B, C, spatial...]
  std::string device_name;                ///< "NVIDIA H200": the profiled GPU as CUDA names it
  std::string card;                       ///< its id in the card table ("h200_sxm"), or "" when not found there
  std::string torch_version;
  bool tf32_matmul = false;
  bool tf32_cudnn = false;
  bool channels_last = false;
  bool cuda_graph = false;          ///< wall_s_per_step timed graph replays (the kernels are eager steps')
  std::string attention;            ///< attention mode of transformer networks ("auto", "sdpa", "math")
  std::int64_t profiled_steps = 0;  ///< steps under the profiler (kernel times are per step)
  double wall_s_per_step = 0;       ///< mean wall time of one step, measured without the profiler
  /// The card's dense GEMM rate in TFLOP/s for the step's tensor arithmetic (`gemm_math`), measured
  /// beside the profile (an 8192^3 matrix product); 0 where not measured (older profiles).
  double gemm_tflops = 0;
  MathKind gemm_math = MathKind::kFp16Tensor;
  std::vector<KernelRecord> kernels;

  double kernel_s_per_step() const;
  /// Wall time the GPU did not spend in kernels (launches, CPU work, synchronisation): kept as it
  /// is on every card. Never negative.
  double overhead_s_per_step() const;
  double samples_per_s() const { return wall_s_per_step > 0 ? static_cast<double>(batch) / wall_s_per_step : 0.0; }
  /// "resnet50 float16 inference b64", for tables.
  std::string label() const;
};

nlohmann::json to_json(const KernelProfile& profile);
/// Reads a profile from JSON; `where` (the file) names the source in errors (IoError: one line
/// naming the file, the field and what was expected).
KernelProfile profile_from_json(const nlohmann::json& j, const std::string& where);
/// Reads profile.json; IoError naming the file when it is missing, not JSON or not a profile.
KernelProfile load_profile(const std::filesystem::path& path);
/// Writes the profile atomically (pretty JSON).
void save_profile(const std::filesystem::path& path, const KernelProfile& profile);

}  // namespace voxfit::cards
