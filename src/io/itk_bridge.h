#pragma once
// Between voxfit::Volume and itk::Image<float, 3> (private to src/io: ITK stays out of headers
// other modules see).
#include <itkImage.h>

#include <array>
#include <cstdint>
#include <cstring>

#include "voxfit/core/volume.h"

namespace voxfit::io {

using FloatImage = itk::Image<float, 3>;

/// ITK's size, spacing, origin and direction for a grid of `size` voxels (x, y, z) with `geometry`.
struct ItkGrid {
  FloatImage::SizeType size;
  FloatImage::SpacingType spacing;
  FloatImage::PointType origin;
  FloatImage::DirectionType direction;
};

inline ItkGrid to_itk_grid(const std::array<std::int64_t, 3>& size, const Geometry& geometry) {
  ItkGrid g;
  for (unsigned i = 0; i < 3; ++i) {
    g.size[i] = static_cast<itk::SizeValueType>(size[i]);
    g.spacing[i] = geometry.spacing[i];
    g.origin[i] = geometry.origin[i];
    for (unsigned j = 0; j < 3; ++j) g.direction[i][j] = geometry.direction[i * 3 + j];
  }
  return g;
}

inline FloatImage::Pointer to_itk_image(const Volume& v) {
  const ItkGrid g = to_itk_grid(v.size(), v.geometry);
  FloatImage::Pointer image = FloatImage::New();
  image->SetRegions(FloatImage::RegionType(g.size));
  image->SetSpacing(g.spacing);
  image->SetOrigin(g.origin);
  image->SetDirection(g.direction);
  image->Allocate();
  const torch::Tensor data = v.data.to(torch::kFloat32).contiguous();
  std::memcpy(image->GetBufferPointer(), data.data_ptr<float>(),
              static_cast<std::size_t>(data.numel()) * sizeof(float));
  return image;
}

/// A float32 volume (pixel_type Float32) with the image's geometry.
inline Volume from_itk_image(const FloatImage* image) {
  const auto region = image->GetBufferedRegion();
  const auto s = region.GetSize();
  Volume v;
  v.data =
      torch::empty({static_cast<std::int64_t>(s[2]), static_cast<std::int64_t>(s[1]), static_cast<std::int64_t>(s[0])},
                   torch::kFloat32);
  std::memcpy(v.data.data_ptr<float>(), image->GetBufferPointer(),
              static_cast<std::size_t>(v.data.numel()) * sizeof(float));
  for (unsigned i = 0; i < 3; ++i) {
    v.geometry.spacing[i] = image->GetSpacing()[i];
    v.geometry.origin[i] = image->GetOrigin()[i];
    for (unsigned j = 0; j < 3; ++j) v.geometry.direction[i * 3 + j] = image->GetDirection()[i][j];
  }
  v.pixel_type = PixelType::Float32;
  return v;
}

}  // namespace voxfit::io
