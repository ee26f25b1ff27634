#include "voxfit/bench/report.h"

#include <nlohmann/json.hpp>

#include <cstdio>

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/provenance.h"
#include "voxfit/core/runtime.h"
#include "voxfit/core/units.h"

namespace voxfit::bench {

namespace {

template <typename... Args>
std::string format(const char* fmt, Args... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

std::string on_off(bool b) { return b ? "on" : "off"; }

std::string steady_range(const BenchResult& r) {
  const auto last = static_cast<int>(r.iterations.size()) - 1;
  return last == 1 ? "iteration 1" : "iterations 1-" + std::to_string(last);
}

}  // namespace

std::string namespace_text(const BenchOptions& o) {
  const std::string device = o.device.is_cuda() ? std::to_string(o.device.index()) : "'cpu'";
  return "Namespace(device=" + device + ", model='" + o.model + "', precision='" + to_string(o.precision) +
         "', train=" + (o.train ? "True" : "False") + ")";
}

std::string iteration_text(const IterationTiming& it) {
  return format("Iteration %d, %.2f images/s in %.3fs.", it.index, it.images_per_s(), it.seconds);
}

std::string reference_line(const BenchResult& r) {
  std::string line = namespace_text(r.options);
  for (const auto& it : r.iterations) line += " " + iteration_text(it);
  return line;
}

std::string summary_text(const BenchResult& r, const std::vector<Comparison>& comparisons) {
  const BenchOptions& o = r.options;
  std::string s = format("steady state: %.2f images/s (mean of ", r.steady_images_per_s()) + steady_range(r) + ", " +
                  std::to_string(o.batch * o.steps) + " images each)\n";
  for (const auto& c : comparisons)
    s += format("vs %s: %.2fx (published %g images/s, %s %s)\n", c.reference.card.c_str(), c.ratio,
                c.reference.images_per_s, c.reference.model.c_str(), c.reference.precision.c_str());
  if (comparisons.empty())
    s += o.train ? "vs published: none (the published numbers are for inference)\n"
                 : "vs published: none for " + o.model + " " + to_string(o.precision) + "\n";
  const std::string device =
      r.device_name + (o.device.is_cuda() ? " (cuda:" + std::to_string(o.device.index()) + ")" : "");
  // The protocol's float16 is model.half(): pure half weights and activations, not autocast.
  const std::string precision = o.precision == Precision::kFloat16    ? "float16 (pure half, the protocol's .half())"
                                : o.precision == Precision::kBfloat16 ? "bfloat16 (pure, as .half() in bfloat16)"
                                                                      : "float32";
  s += "settings: " + device + ", " + precision + ", batch " + std::to_string(o.batch) + " x " +
       std::to_string(o.steps) + " steps, " + to_string(o.input) + " input, tf32 matmul " + on_off(o.tf32_matmul) +
       ", tf32 cudnn " + on_off(o.tf32_cudnn) + ", cudnn benchmark " + on_off(o.cudnn_benchmark) + ", channels-last " +
       on_off(r.channels_last) + ", cuda graph " + on_off(r.cuda_graph) + ", BatchNorm folded " + on_off(r.folded) +
       ", attention " + models::to_string(o.attention) + "\n";
  if (r.peak_allocated)
    s += "peak memory: " + format_bytes(*r.peak_allocated) + " allocated / " + format_bytes(*r.peak_reserved) +
         " reserved\n";
  return s;
}

nlohmann::json result_json(const BenchResult& r, const std::vector<Comparison>& comparisons,
                           const std::string& reference_file) {
  const BenchOptions& o = r.options;
  nlohmann::json j;
  j["line"] = reference_line(r);
  j["model"] = o.model;
  j["precision"] = to_string(o.precision);
  j["train"] = o.train;
  j["device"] = {{"type", o.device.is_cuda() ? "cuda" : "cpu"},
                 {"index", o.device.is_cuda() ? nlohmann::json(o.device.index()) : nlohmann::json()},
                 {"name", r.device_name}};
  j["settings"] = {{"batch", o.batch},
                   {"steps", o.steps},
                   {"iterations", o.iterations},
                   {"images_per_iteration", o.batch * o.steps},
                   {"input_shape", {o.in_channels, o.image_size, o.image_size}},
                   {"num_classes", o.num_classes},
                   {"input", to_string(o.input)},
                   {"tf32_matmul", o.tf32_matmul},
                   {"tf32_cudnn", o.tf32_cudnn},
                   {"cudnn_benchmark", o.cudnn_benchmark},
                   {"channels_last", r.channels_last},
                   {"cuda_graph", r.cuda_graph},
                   {"batch_norm_folded", r.folded},
                   {"attention", models::to_string(o.attention)}};
  if (o.train) j["settings"]["learning_rate"] = o.learning_rate;
  j["provenance"] = provenance(o.device);
  auto& its = j["iterations"] = nlohmann::json::array();
  for (const auto& it : r.iterations)
    its.push_back(
        {{"index", it.index}, {"images", it.images}, {"seconds", it.seconds}, {"images_per_s", it.images_per_s()}});
  if (r.peak_allocated) j["peak_memory"] = {{"allocated", *r.peak_allocated}, {"reserved", *r.peak_reserved}};
  j["steady_state"] = {{"images_per_s", r.steady_images_per_s()},
                       {"first_iteration", 1},
                       {"last_iteration", static_cast<int>(r.iterations.size()) - 1}};
  j["reference_file"] = reference_file;
  auto& cs = j["comparisons"] = nlohmann::json::array();
  for (const auto& c : comparisons)
    cs.push_back({{"card", c.reference.card},
                  {"model", c.reference.model},
                  {"precision", c.reference.precision},
                  {"published_images_per_s", c.reference.images_per_s},
                  {"ratio", c.ratio}});
  return j;
}

void write_result_json(const std::filesystem::path& path, const BenchResult& result,
                       const std::vector<Comparison>& comparisons, const std::string& reference_file) {
  write_file_atomic(path, result_json(result, comparisons, reference_file).dump(2) + "\n");
}

}  // namespace voxfit::bench
