#include "voxfit/cards/kernel_profile.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/error.h"

namespace voxfit::cards {

using json = nlohmann::json;

std::string to_string(MathKind kind) {
  switch (kind) {
    case MathKind::kFp16Tensor:
      return "fp16_tensor";
    case MathKind::kBf16Tensor:
      return "bf16_tensor";
    case MathKind::kTf32:
      return "tf32";
    case MathKind::kFp32:
      return "fp32";
  }
  return "fp32";
}

MathKind parse_math_kind(const std::string& text, const std::string& where) {
  for (MathKind k : {MathKind::kFp16Tensor, MathKind::kBf16Tensor, MathKind::kTf32, MathKind::kFp32})
    if (to_string(k) == text) return k;
  throw IoError(where + ": math: expected fp16_tensor, bf16_tensor, tf32 or fp32, got '" + text + "'");
}

double KernelProfile::kernel_s_per_step() const {
  double us = 0;
  for (const auto& k : kernels) us += k.time_us;
  return us * 1e-6;
}

double KernelProfile::overhead_s_per_step() const {
  const double gap = wall_s_per_step - kernel_s_per_step();
  return gap > 0 ? gap : 0.0;
}

std::string KernelProfile::label() const {
  return model + " " + precision + " " + (train ? "training" : "inference") + " b" + std::to_string(batch);
}

json to_json(const KernelProfile& p) {
  json kernels = json::array();
  for (const auto& k : p.kernels)
    kernels.push_back({{"name", k.name},
                       {"kind", k.kind},
                       {"op", k.op},
                       {"flops_op", k.flops_op},
                       {"math", to_string(k.math)},
                       {"calls", k.calls},
                       {"time_us", k.time_us},
                       {"flops", k.flops},
                       {"bytes", k.bytes}});
  return {{"format", "voxfit-kernel-profile"},
          {"version", KernelProfile::kVersion},
          {"model", p.model},
          {"precision", p.precision},
          {"train", p.train},
          {"batch", p.batch},
          {"input_shape", p.input_shape},
          {"device_name", p.device_name},
          {"card", p.card},
          {"torch_version", p.torch_version},
          {"tf32_matmul", p.tf32_matmul},
          {"tf32_cudnn", p.tf32_cudnn},
          {"channels_last", p.channels_last},
          {"cuda_graph", p.cuda_graph},
          {"attention", p.attention},
          {"profiled_steps", p.profiled_steps},
          {"wall_s_per_step", p.wall_s_per_step},
          {"kernel_s_per_step", p.kernel_s_per_step()},
          {"overhead_s_per_step", p.overhead_s_per_step()},
          {"samples_per_s", p.samples_per_s()},
          {"gemm", {{"math", to_string(p.gemm_math)}, {"tflops", p.gemm_tflops}}},
          {"kernels", kernels}};
}

namespace {

template <typename T>
T field(const json& j, const char* name, const std::string& where) {
  if (!j.is_object() || !j.contains(name)) throw IoError(where + ": missing field '" + name + "'");
  try {
    return j.at(name).get<T>();
  } catch (const json::exception&) {
    throw IoError(where + ": field '" + name + "' has the wrong type (" + j.at(name).type_name() + ")");
  }
}

}  // namespace

KernelProfile profile_from_json(const json& j, const std::string& where) {
  if (!j.is_object() || j.value("format", "") != "voxfit-kernel-profile")
    throw IoError(where + ": not a voxfit kernel profile (expected \"format\": \"voxfit-kernel-profile\")");
  const int version = field<int>(j, "version", where);
  if (version != KernelProfile::kVersion)
    throw IoError(where + ": profile version " + std::to_string(version) + ", this voxfit reads version " +
                  std::to_string(KernelProfile::kVersion));
  KernelProfile p;
  p.model = field<std::string>(j, "model", where);
  p.precision = field<std::string>(j, "precision", where);
  p.train = field<bool>(j, "train", where);
  p.batch = field<std::int64_t>(j, "batch", where);
  p.input_shape = field<std::vector<std::int64_t>>(j, "input_shape", where);
  p.device_name = field<std::string>(j, "device_name", where);
  p.card = field<std::string>(j, "card", where);
  p.torch_version = j.value("torch_version", "");
  p.tf32_matmul = field<bool>(j, "tf32_matmul", where);
  p.tf32_cudnn = field<bool>(j, "tf32_cudnn", where);
  p.channels_last = j.value("channels_last", false);
  p.cuda_graph = j.value("cuda_graph", false);
  p.attention = j.value("attention", "");
  p.profiled_steps = field<std::int64_t>(j, "profiled_steps", where);
  p.wall_s_per_step = field<double>(j, "wall_s_per_step", where);
  if (p.batch < 1) throw IoError(where + ": batch must be >= 1, got " + std::to_string(p.batch));
  if (!(p.wall_s_per_step > 0)) throw IoError(where + ": wall_s_per_step must be > 0");
  if (j.contains("gemm")) {  // optional: profiles before the GEMM measurement have none
    const json gemm = field<json>(j, "gemm", where);
    p.gemm_math = parse_math_kind(field<std::string>(gemm, "math", where + ": gemm"), where + ": gemm");
    p.gemm_tflops = field<double>(gemm, "tflops", where + ": gemm");
    if (p.gemm_tflops < 0) throw IoError(where + ": gemm: tflops must be >= 0");
  }
  const json kernels = field<json>(j, "kernels", where);
  if (!kernels.is_array()) throw IoError(where + ": field 'kernels' must be an array");
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    const std::string at = where + ": kernels[" + std::to_string(i) + "]";
    const json& k = kernels[i];
    KernelRecord r;
    r.name = field<std::string>(k, "name", at);
    r.kind = field<std::string>(k, "kind", at);
    r.op = field<std::string>(k, "op", at);
    r.flops_op = field<std::string>(k, "flops_op", at);
    r.math = parse_math_kind(field<std::string>(k, "math", at), at);
    r.calls = field<std::int64_t>(k, "calls", at);
    r.time_us = field<double>(k, "time_us", at);
    r.flops = field<double>(k, "flops", at);
    r.bytes = field<double>(k, "bytes", at);
    if (r.time_us < 0 || r.flops < 0 || r.bytes < 0) throw IoError(at + ": negative time, flops or bytes");
    p.kernels.push_back(std::move(r));
  }
  if (p.kernels.empty()) throw IoError(where + ": the profile has no kernels");
  return p;
}

KernelProfile load_profile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw IoError(path.string() + ": cannot read the profile (missing or unreadable)");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    std::string what = e.what();
    throw IoError(path.string() + ": not valid JSON (" + what.substr(0, what.find('\n')) + ")");
  }
  return profile_from_json(j, path.string());
}

void save_profile(const std::filesystem::path& path, const KernelProfile& profile) {
  write_file_atomic(path, to_json(profile).dump(1) + "\n");
}

}  // namespace voxfit::cards
