#pragma once
// --isolate: every probe of a max-batch search in a fresh voxfit process, so no allocator state,
// cuDNN cache or CUDA error of one probe reaches the next. The parent runs the command line it is
// given plus --probe-batch B --probe-output FILE; the child answers into FILE.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace voxfit::sweep {

/// One probe of a search run somewhere else. Given a batch it returns what run_probe_here()
/// returned there; batch 0 asks only for the budget's report.
using IsolatedProbe = std::function<nlohmann::json(std::int64_t batch)>;

/// The parent's side: a probe at batch B runs `command` (voxfit's own arguments: the command line
/// on the prepared cache) plus --probe-batch B --probe-output FILE as a new process, never as a rank
/// of a data-parallel job, and returns the JSON it wrote (FILE lies in `scratch` and is removed). A
/// probe process that fails is an Error; one that found the setting unsupported becomes an
/// UnsupportedError here.
IsolatedProbe isolated_probe(std::vector<std::string> command, std::filesystem::path scratch);

/// The child's side: runs `probe` at `batch` and writes its JSON (or {"unsupported": why}) to
/// `output` atomically.
void answer_isolated_probe(std::int64_t batch, const std::filesystem::path& output,
                           const std::function<nlohmann::json(std::int64_t batch)>& probe);

}  // namespace voxfit::sweep
