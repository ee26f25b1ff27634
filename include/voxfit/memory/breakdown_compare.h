#pragma once
// A predicted memory breakdown beside a measured one, component by component.
#include <cstdint>
#include <string>
#include <vector>

#include "voxfit/memory/memory_breakdown.h"

namespace voxfit::memory {

struct ComponentError {
  std::string name;  ///< a part's name, "activations (all blocks)" or "peak"
  std::int64_t predicted = 0, measured = 0;
  /// (predicted - measured) / measured; 0 when both are 0, +-inf when only measured is 0.
  double relative() const;
};

/// Every part of `predicted` with the measured part of the same name (0 where `measured` has none),
/// then the measured parts the prediction lacks, then the per-block activations summed ("activations
/// (all blocks)", other activations excluded) and the peak (peak_allocated).
std::vector<ComponentError> compare_breakdowns(const MemoryBreakdown& predicted, const MemoryBreakdown& measured);

}  // namespace voxfit::memory
