#include "voxfit/memory/breakdown_compare.h"

#include <algorithm>
#include <limits>

namespace voxfit::memory {

namespace {

std::int64_t find_part(const MemoryBreakdown& b, const std::string& name) {
  const auto it = std::find_if(b.parts.begin(), b.parts.end(), [&](const BreakdownPart& p) { return p.name == name; });
  return it == b.parts.end() ? 0 : it->bytes;
}

bool has_part(const MemoryBreakdown& b, const std::string& name) {
  return std::any_of(b.parts.begin(), b.parts.end(), [&](const BreakdownPart& p) { return p.name == name; });
}

std::int64_t block_activations(const MemoryBreakdown& b) {
  std::int64_t n = 0;
  for (const auto& p : b.parts)
    if (p.group == "activations" && p.name != "other activations") n += p.bytes;
  return n;
}

}  // namespace

double ComponentError::relative() const {
  if (measured == 0) return predicted == 0 ? 0.0 : std::numeric_limits<double>::infinity() * (predicted > 0 ? 1 : -1);
  return static_cast<double>(predicted - measured) / static_cast<double>(measured);
}

std::vector<ComponentError> compare_breakdowns(const MemoryBreakdown& predicted, const MemoryBreakdown& measured) {
  std::vector<ComponentError> rows;
  for (const auto& p : predicted.parts) rows.push_back({p.name, p.bytes, find_part(measured, p.name)});
  for (const auto& m : measured.parts)
    if (!has_part(predicted, m.name)) rows.push_back({m.name, 0, m.bytes});
  rows.push_back({"activations (all blocks)", block_activations(predicted), block_activations(measured)});
  rows.push_back({"peak", static_cast<std::int64_t>(predicted.peak_allocated),
                  static_cast<std::int64_t>(measured.peak_allocated)});
  return rows;
}

}  // namespace voxfit::memory
