#pragma once
// Input-shape rules shared by the nets' check_input(); every message names the network, the
// offending dimensions, the whole shape and the rule (MONAI's _check_input_size in spirit).
#include <cstdint>
#include <string>
#include <vector>

namespace voxfit::models {

/// Throws ModelError unless `shape` is [B, channels, spatial_dims sizes] with B >= 1 and sizes >= 1.
void check_channels(const std::string& net, const std::vector<int64_t>& shape, int spatial_dims, int64_t channels);
/// Throws ModelError naming every spatial axis of `shape` not divisible by `divisor` (`why`
/// says where the divisor comes from).
void check_divisible(const std::string& net, const std::vector<int64_t>& shape, int64_t divisor,
                     const std::string& why);
/// Build-time form for a configured patch: throws ModelError unless `patch` has `dims` sizes,
/// all divisible by `divisor`.
void check_patch(const std::string& net, const std::vector<int64_t>& patch, size_t dims, int64_t divisor,
                 const std::string& why);
/// Throws ModelError unless the spatial sizes of `shape` equal `expected` (`why` says why).
void check_spatial_equals(const std::string& net, const std::vector<int64_t>& shape,
                          const std::vector<int64_t>& expected, const std::string& why);

}  // namespace voxfit::models
