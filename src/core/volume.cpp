#include "voxfit/core/volume.h"

#include <cmath>
#include <sstream>

#include "voxfit/core/error.h"
#include "voxfit/core/units.h"

namespace voxfit {

namespace {

struct PixelTypeName {
  PixelType type;
  const char* name;
  torch::ScalarType dtype;
};

const PixelTypeName kPixelTypes[] = {
    {PixelType::UInt8, "uint8", torch::kUInt8},       {PixelType::Int8, "int8", torch::kInt8},
    {PixelType::UInt16, "uint16", torch::kInt32},     {PixelType::Int16, "int16", torch::kInt16},
    {PixelType::UInt32, "uint32", torch::kInt64},     {PixelType::Int32, "int32", torch::kInt32},
    {PixelType::UInt64, "uint64", torch::kInt64},     {PixelType::Int64, "int64", torch::kInt64},
    {PixelType::Float32, "float32", torch::kFloat32}, {PixelType::Float64, "float64", torch::kFloat64},
};

std::string format_number(double v) {
  std::ostringstream s;
  s.precision(6);
  s << v;
  return s.str();
}

}  // namespace

std::string to_string(PixelType type) {
  for (const auto& p : kPixelTypes)
    if (p.type == type) return p.name;
  return "unknown";
}

PixelType pixel_type_from_string(const std::string& name, const std::string& what) {
  for (const auto& p : kPixelTypes)
    if (name == p.name) return p.type;
  throw IoError(what + ": unknown pixel type '" + name + "' (expected uint8, int16, float32, ...)");
}

torch::ScalarType tensor_dtype(PixelType type) {
  for (const auto& p : kPixelTypes)
    if (p.type == type) return p.dtype;
  return torch::kFloat32;
}

bool is_floating(PixelType type) { return type == PixelType::Float32 || type == PixelType::Float64; }

std::array<double, 3> Geometry::index_to_point(const std::array<double, 3>& index) const {
  std::array<double, 3> p = origin;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) p[r] += direction[r * 3 + c] * spacing[c] * index[c];
  return p;
}

std::array<std::int64_t, 3> Volume::size() const {
  if (!data.defined() || data.dim() != 3) return {0, 0, 0};
  return {data.size(2), data.size(1), data.size(0)};
}

std::string format_triple(const std::array<double, 3>& v) {
  return "(" + format_number(v[0]) + ", " + format_number(v[1]) + ", " + format_number(v[2]) + ")";
}

std::string format_size(const std::array<std::int64_t, 3>& v) { return shape_text(v); }

std::string grid_difference(const std::array<std::int64_t, 3>& size_a, const Geometry& a,
                            const std::array<std::int64_t, 3>& size_b, const Geometry& b, const GridTolerance& tol) {
  if (size_a != size_b) return "size " + format_size(size_a) + " vs " + format_size(size_b);
  for (int i = 0; i < 3; ++i) {
    const double scale = std::max(std::abs(a.spacing[i]), std::abs(b.spacing[i]));
    if (std::abs(a.spacing[i] - b.spacing[i]) > tol.spacing_rel * scale)
      return "spacing " + format_triple(a.spacing) + " vs " + format_triple(b.spacing);
  }
  for (int i = 0; i < 3; ++i)
    if (std::abs(a.origin[i] - b.origin[i]) > tol.origin_mm)
      return "origin " + format_triple(a.origin) + " vs " + format_triple(b.origin);
  for (int i = 0; i < 9; ++i)
    if (std::abs(a.direction[i] - b.direction[i]) > tol.direction) {
      std::string da, db;
      for (int k = 0; k < 9; ++k) {
        da += (k ? " " : "") + format_number(a.direction[k]);
        db += (k ? " " : "") + format_number(b.direction[k]);
      }
      return "direction [" + da + "] vs [" + db + "]";
    }
  return "";
}

bool same_voxel_centres(const std::array<std::int64_t, 3>& size_a, const Geometry& a,
                        const std::array<std::int64_t, 3>& size_b, const Geometry& b, const GridTolerance& tol) {
  // m maps a's index steps to physical offsets; its inverse takes b's steps into a's index space.
  double m[9];
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) m[r * 3 + c] = a.direction[r * 3 + c] * a.spacing[c];
  const double det =
      m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6]) + m[2] * (m[3] * m[7] - m[4] * m[6]);
  if (std::abs(det) < 1e-12) return false;
  const double inv[9] = {
      (m[4] * m[8] - m[5] * m[7]) / det, (m[2] * m[7] - m[1] * m[8]) / det, (m[1] * m[5] - m[2] * m[4]) / det,
      (m[5] * m[6] - m[3] * m[8]) / det, (m[0] * m[8] - m[2] * m[6]) / det, (m[2] * m[3] - m[0] * m[5]) / det,
      (m[3] * m[7] - m[4] * m[6]) / det, (m[1] * m[6] - m[0] * m[7]) / det, (m[0] * m[4] - m[1] * m[3]) / det};
  const auto to_a = [&](const std::array<double, 3>& offset) {
    std::array<double, 3> out{};
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) out[r] += inv[r * 3 + c] * offset[c];
    return out;
  };
  const double eps = 1e-3;
  const std::array<double, 3> start =
      to_a({b.origin[0] - a.origin[0], b.origin[1] - a.origin[1], b.origin[2] - a.origin[2]});
  std::array<bool, 3> used{false, false, false};
  for (int j = 0; j < 3; ++j) {
    const std::array<double, 3> step =
        to_a({b.direction[0 * 3 + j] * b.spacing[j], b.direction[1 * 3 + j] * b.spacing[j],
              b.direction[2 * 3 + j] * b.spacing[j]});
    int axis = -1;
    for (int k = 0; k < 3; ++k) {
      if (std::abs(std::abs(step[k]) - 1.0) < tol.spacing_rel * 10 + eps) {
        if (axis >= 0) return false;
        axis = k;
      } else if (std::abs(step[k]) > eps) {
        return false;
      }
    }
    if (axis < 0 || used[axis] || size_b[j] != size_a[axis]) return false;
    used[axis] = true;
    // b's first voxel along this axis sits at a's first or last index, its steps running inward.
    const double first = start[axis], expected = step[axis] > 0 ? 0.0 : static_cast<double>(size_a[axis] - 1);
    if (std::abs(first - expected) > eps + tol.origin_mm / a.spacing[axis]) return false;
  }
  return true;
}

std::string grid_difference(const Volume& a, const Volume& b, const GridTolerance& tol) {
  return grid_difference(a.size(), a.geometry, b.size(), b.geometry, tol);
}

Volume crop(const Volume& v, const std::array<std::int64_t, 3>& begin, const std::array<std::int64_t, 3>& size) {
  const auto full = v.size();
  for (int i = 0; i < 3; ++i)
    if (begin[i] < 0 || size[i] <= 0 || begin[i] + size[i] > full[i])
      throw DataError("crop box " + format_size(begin) + " + " + format_size(size) +
                      " does not fit in a volume of size " + format_size(full));
  Volume out;
  out.pixel_type = v.pixel_type;
  out.geometry = v.geometry;
  out.geometry.origin = v.geometry.index_to_point(
      {static_cast<double>(begin[0]), static_cast<double>(begin[1]), static_cast<double>(begin[2])});
  out.data = v.data.slice(0, begin[2], begin[2] + size[2])
                 .slice(1, begin[1], begin[1] + size[1])
                 .slice(2, begin[0], begin[0] + size[0])
                 .contiguous();
  return out;
}

}  // namespace voxfit
