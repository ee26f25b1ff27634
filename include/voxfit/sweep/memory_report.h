#pragma once
// summary.md's memory section: where each point's peak goes (the probes' memory breakdowns).

#include <filesystem>
#include <string>
#include <vector>

#include "voxfit/sweep/point_result.h"

namespace voxfit::sweep {

/// A breakdown table (per point, at batch 1 and at the largest batch that fit) and, per point, a
/// stacked-bar PNG of the two (breakdown-<point>.png) and its components against the batch over
/// the search's probes (components-<point>.png); the Markdown for them. Entries without breakdowns
/// (older journals, skipped points) are left out; "" when none has one.
std::string memory_report(const std::vector<const PointResult*>& entries, const std::filesystem::path& dir);

}  // namespace voxfit::sweep
