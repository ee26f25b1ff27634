#pragma once
// Rotation and scaling of a whole batch through affine_grid / grid_sample, on whatever device the
// batch is (the trainer calls it on CUDA batches; tests run it on the CPU).
#include <array>
#include <cstdint>

#include "voxfit/data/patch_loader.h"

namespace voxfit::data {

struct SpatialAugmentOptions {
  double probability = 0.2;                   ///< per sample
  double max_rotation_degrees = 30.0;         ///< per axis, uniform in [-max, max]
  std::array<double, 2> scale_range{0.7, 1.4};  ///< isotropic zoom factor
};

/// Rotates/scales each chosen sample of `batch` in place: the image trilinearly, the label by
/// nearest neighbour; voxels from outside the patch become 0 (background). The transforms are drawn
/// on the CPU from `seed`, so a seed gives the same result on any device.
void augment_spatial(Batch& batch, const SpatialAugmentOptions& options, std::uint64_t seed);

}  // namespace voxfit::data
