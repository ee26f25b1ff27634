#include "voxfit/models/memory_estimate.h"

#include <c10/core/ScalarType.h>

#include <algorithm>
#include <optional>

#include "voxfit/core/error.h"

namespace voxfit::models {

std::int64_t total_bytes(const DtypeByteCounts& bytes) {
  std::int64_t n = 0;
  for (const auto& [dtype, b] : bytes) n += b;
  return n;
}

std::string dtype_name(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat:
      return "float32";
    case c10::kHalf:
      return "float16";
    case c10::kBFloat16:
      return "bfloat16";
    case c10::kDouble:
      return "float64";
    case c10::kLong:
      return "int64";
    case c10::kInt:
      return "int32";
    case c10::kBool:
      return "bool";
    default:
      return c10::toString(dtype);
  }
}

std::int64_t ActivationEstimate::total() const {
  std::int64_t n = 0;
  for (const auto& b : blocks) n += b.total();
  return n;
}

ActivationEstimate estimate_activations(const NetworkImpl& net, const std::vector<std::int64_t>& input_shape,
                                        c10::ScalarType compute, const KernelPaths& paths) {
  net.check_input(input_shape);
  auto est = net.saved_activations(input_shape, compute, paths, std::nullopt);
  if (!est)
    throw UnsupportedError("no analytic memory model for this network (voxfit models lists those that have one)");
  // A checkpointed block keeps less than it would unchecked; what it would keep is what its
  // recomputation makes again in backward.
  const ActivationEstimate full = *net.saved_activations(input_shape, compute, paths, CheckpointMode::kNone);
  for (std::size_t i = 0; i < est->blocks.size(); ++i) {
    if (est->blocks[i].total() < full.blocks[i].total()) est->blocks[i].recomputed = full.blocks[i].total();
    est->blocks[i].largest = full.blocks[i].largest;
    est->blocks[i].parameters = full.blocks[i].parameters;
  }
  est->largest_tensor = full.largest_tensor;
  return *est;
}

}  // namespace voxfit::models
