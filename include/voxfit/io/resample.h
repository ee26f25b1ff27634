#pragma once
// Resampling onto another grid with ITK's ResampleImageFilter.
#include <array>
#include <cstdint>

#include "voxfit/core/volume.h"

namespace voxfit::io {

enum class Interpolation {
  Linear,   ///< intensities; the result is float32
  Nearest,  ///< label maps; the result keeps the input's dtype and values
};

/// Samples `volume` on the grid (size in x, y, z; geometry) at each target voxel's physical point.
/// Points outside the input get 0.
Volume resample_to_grid(const Volume& volume, const std::array<std::int64_t, 3>& size, const Geometry& geometry,
                        Interpolation interpolation);

/// The grid covering the same region at a new spacing: same origin and direction, size
/// round(size * spacing / new_spacing) per axis (at least 1).
std::array<std::int64_t, 3> resampled_size(const std::array<std::int64_t, 3>& size,
                                           const std::array<double, 3>& spacing,
                                           const std::array<double, 3>& new_spacing);

}  // namespace voxfit::io
