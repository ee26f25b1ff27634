#pragma once
// Pictures of memory breakdowns (memory_breakdown.h's JSON) through gnuplot: a stacked bar per
// breakdown (static, batch, activations by block, workspace, fragmentation, headroom) and each
// component against the batch.
#include <nlohmann/json_fwd.hpp>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace voxfit::memory {

/// One stacked bar per (label, breakdown JSON), in GiB, to `png` (atomically; `png`.dat and .gp
/// beside it). Returns "" on success, else why there is no plot ("gnuplot is not installed").
std::string write_breakdown_bars(const std::vector<std::pair<std::string, nlohmann::json>>& bars,
                                 const std::filesystem::path& png, const std::string& title);

/// Static, batch, activations, workspace and fragmentation against the batch, one line each, from
/// breakdowns of different batches. Returns "" on success, else why there is no plot.
std::string write_components_by_batch(const std::vector<nlohmann::json>& breakdowns, const std::filesystem::path& png,
                                      const std::string& title);

}  // namespace voxfit::memory
