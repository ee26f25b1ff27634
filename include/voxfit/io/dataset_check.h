#pragma once
// Validation of a whole dataset: every problem at once, each naming the file and what was expected.
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "voxfit/io/dataset.h"

namespace voxfit::io {

struct Problem {
  fs::path file;        ///< the file at fault
  std::string message;  ///< what is wrong and what was expected (without the file name)
};

/// "FILE: message", one line.
std::string format_problem(const Problem& p);

struct CheckOptions {
  GridTolerance tolerance;  ///< how close image, label and channel grids must be
};

struct CheckReport {
  std::vector<Problem> problems;
  std::size_t cases = 0;
  std::set<std::int64_t> label_values;  ///< every value found in readable labels
  bool ok() const { return problems.empty(); }
};

/// Reads every file of every case (headers and voxels) and reports: missing files, unreadable or
/// truncated files, non-3D images, wrong channel counts, channels on different grids, image/label
/// grid mismatches (size, spacing, origin, direction), NaN/Inf intensities, non-integer or
/// undeclared label values, and labels without foreground. Never throws for a bad file.
CheckReport check_dataset(const Dataset& dataset, const CheckOptions& options = {});

/// The same checks on one case that is already in memory (image channels in channel order, with the
/// file each came from; label may be null for an unlabelled case).
std::vector<Problem> check_case(const Dataset& dataset, const CaseFiles& files, const Channels& image,
                                const std::vector<fs::path>& channel_files, const Volume* label,
                                const CheckOptions& options = {});

}  // namespace voxfit::io
