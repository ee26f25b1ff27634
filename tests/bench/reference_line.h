#pragma once
// The reference benchmark's output line (../shared/reference/README.md), shared by the bench tests.
#include <regex>

namespace voxfit::test {

/// One line as the reference printed it: argparse's Namespace repr (a CPU device prints as the
/// string 'cpu'), then "Iteration N, X.XX images/s in Y.YYYs." items separated by single spaces.
inline const std::regex& reference_line_format() {
  static const std::regex format(
      R"(^Namespace\(device=(\d+|'cpu'), model='[a-z0-9_]+', precision='(float16|float32)', )"
      R"(train=(True|False)\)( Iteration \d+, \d+\.\d{2} images/s in \d+\.\d{3}s\.)+$)");
  return format;
}

}  // namespace voxfit::test
