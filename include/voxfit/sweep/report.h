#pragma once
// A sweep's reports, rewritten from the whole journal after every point: results.csv (one row a
// point), summary.md (budgets side by side, the memory breakdowns) and the PNG plots (gnuplot).
#include <filesystem>
#include <vector>

#include "voxfit/sweep/point_result.h"

namespace voxfit::sweep {

/// results.csv, summary.md and the plots (plots need gnuplot; without it the summary says so).
void write_reports(const std::vector<PointResult>& entries, const std::filesystem::path& dir);

}  // namespace voxfit::sweep
