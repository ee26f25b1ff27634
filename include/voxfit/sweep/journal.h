#pragma once
// A sweep's journal: DIR/results.jsonl, one JSON object a finished point (an interrupted sweep
// resumes where it stopped), and DIR/probes.jsonl, the probes of the point in progress; merging
// the journals of a distributed sweep.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "voxfit/sweep/point_result.h"

namespace voxfit::sweep {

/// Voxels of one patch (journal entries write patches as core's shape_text, "96x96x96").
std::int64_t patch_voxels(const std::vector<std::int64_t>& patch);

/// Journal entries in file order; a truncated last line (a crash mid-write) is skipped.
std::vector<nlohmann::json> read_journal(const std::filesystem::path& file);

/// The points of a results journal (read_journal's entries as PointResult); an entry of the wrong
/// shape is skipped, as a truncated line is.
std::vector<PointResult> read_results(const std::filesystem::path& file);

/// Rewrites the probe journal `file` without the probes of `key` (removed when none is left).
void forget_probes(const std::filesystem::path& file, const std::string& key);

/// Joins the journals of a distributed sweep into `dir`/results.jsonl (written atomically) and
/// rewrites the reports; an entry keeps its first appearance's place, a measured entry replaces a
/// skipped one for the same key. Returns the merged entries; throws ConfigError if there are none.
std::vector<PointResult> merge_journals(const std::vector<std::filesystem::path>& journals,
                                        const std::filesystem::path& dir);

/// Every journal of a distributed sweep in `dir`: dir/points/*/results.jsonl, sorted; throws
/// ConfigError when there is none.
std::vector<std::filesystem::path> point_journals(const std::filesystem::path& dir);

}  // namespace voxfit::sweep
