#pragma once
// The benchmark's output: the reference's one-line format, the summary printed after it, and the
// JSON result file.
#include <nlohmann/json_fwd.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "voxfit/bench/benchmark.h"
#include "voxfit/bench/reference_table.h"

namespace voxfit::bench {

/// The Python argparse repr the reference printed first, e.g.
/// `Namespace(device=0, model='resnet50', precision='float16', train=False)`; a CPU run prints
/// `device='cpu'`, as argparse would for that string.
std::string namespace_text(const BenchOptions& options);
/// `Iteration 0, 2294.06 images/s in 0.837s.`
std::string iteration_text(const IterationTiming& it);
/// The whole reference line: the Namespace, then every iteration, separated by single spaces.
std::string reference_line(const BenchResult& result);

/// The lines printed after the reference line: the steady-state mean, each comparison as a ratio,
/// and the settings in effect (device, batch x steps, input, TF32, cuDNN, layout, graph, attention).
std::string summary_text(const BenchResult& result, const std::vector<Comparison>& comparisons);

/// Everything above as JSON (options, device, versions, iterations, steady state, comparisons).
nlohmann::json result_json(const BenchResult& result, const std::vector<Comparison>& comparisons,
                           const std::string& reference_file);
/// Writes result_json atomically to `path`.
void write_result_json(const std::filesystem::path& path, const BenchResult& result,
                       const std::vector<Comparison>& comparisons, const std::string& reference_file);

}  // namespace voxfit::bench
