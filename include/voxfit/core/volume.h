#pragma once
// A 3D image with its geometry: what crosses from `io` to `data`, never a bare tensor.
//
// Axis order: the tensor is [D, H, W] = [z, y, x], the order of an ITK buffer (x varies fastest),
// so a volume's memory is exactly the file's voxel order. Geometry follows ITK and is in (x, y, z)
// order: spacing[0] is the x spacing, size() is {x, y, z}. direction is row-major: the physical
// direction of index axis j is the column (direction[0*3+j], direction[1*3+j], direction[2*3+j]).
#include <torch/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace voxfit {

/// The voxel type a volume had in its source file; writers use it to store the same type again.
enum class PixelType { UInt8, Int8, UInt16, Int16, UInt32, Int32, UInt64, Int64, Float32, Float64 };

/// "uint8", "int16", "float32", ...
std::string to_string(PixelType type);
/// Inverse of to_string; throws IoError naming `what` for an unknown name.
PixelType pixel_type_from_string(const std::string& name, const std::string& what = "pixel type");
/// The tensor dtype a volume of this pixel type is held in (uint16 -> int32, uint32/uint64 -> int64:
/// LibTorch has no unsigned types wider than 8 bits).
torch::ScalarType tensor_dtype(PixelType type);
bool is_floating(PixelType type);

/// Where a grid lies in physical space (millimetres, ITK/LPS conventions).
struct Geometry {
  std::array<double, 3> spacing{1.0, 1.0, 1.0};                ///< (x, y, z)
  std::array<double, 3> origin{0.0, 0.0, 0.0};                 ///< physical position of voxel (0, 0, 0)
  std::array<double, 9> direction{1, 0, 0, 0, 1, 0, 0, 0, 1};  ///< row-major 3x3

  /// Physical point of a continuous index (x, y, z).
  std::array<double, 3> index_to_point(const std::array<double, 3>& index) const;
};

/// Tolerances for "same grid": relative for spacing, absolute (mm) for origin, absolute for the
/// direction cosines. Loose enough for float round-off in NIfTI qform/sform, tight enough to catch
/// a real mismatch (a different slice or a flipped axis).
struct GridTolerance {
  double spacing_rel = 1e-4;
  double origin_mm = 1e-3;
  double direction = 1e-4;
};

struct Volume {
  torch::Tensor data;  ///< [D, H, W] on the CPU, dtype tensor_dtype(pixel_type) unless converted
  Geometry geometry;
  PixelType pixel_type = PixelType::Float32;

  /// Voxels per axis in (x, y, z) order.
  std::array<std::int64_t, 3> size() const;
  const std::array<double, 3>& spacing() const { return geometry.spacing; }
  const std::array<double, 3>& origin() const { return geometry.origin; }
  const std::array<double, 9>& direction() const { return geometry.direction; }
};

/// One case's co-registered channels (four MRI sequences, or one CT).
using Channels = std::vector<Volume>;

/// The first way two grids differ ("size 122x101x30 vs 122x101x31", "spacing ..."), or "" if equal.
std::string grid_difference(const Volume& a, const Volume& b, const GridTolerance& tol = {});
/// Same as grid_difference on sizes and geometries directly.
std::string grid_difference(const std::array<std::int64_t, 3>& size_a, const Geometry& a,
                            const std::array<std::int64_t, 3>& size_b, const Geometry& b,
                            const GridTolerance& tol = {});

/// True when grid b has exactly grid a's voxel centres, in another axis order or direction (an
/// image stored flipped or transposed relative to its label, as RAS- and LPS-minded tools write
/// them): a nearest-neighbour resampling then moves b onto a without changing any value.
bool same_voxel_centres(const std::array<std::int64_t, 3>& size_a, const Geometry& a,
                        const std::array<std::int64_t, 3>& size_b, const Geometry& b, const GridTolerance& tol = {});

/// "(3, 3, 2.5)" / "122x101x30": how messages print geometry.
std::string format_triple(const std::array<double, 3>& v);
std::string format_size(const std::array<std::int64_t, 3>& v);

/// The sub-volume [begin, begin + size) in (x, y, z) index order, with its origin moved so every
/// voxel keeps its physical position.
Volume crop(const Volume& v, const std::array<std::int64_t, 3>& begin, const std::array<std::int64_t, 3>& size);

}  // namespace voxfit
