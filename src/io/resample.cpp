#include "voxfit/io/resample.h"

#include <itkLinearInterpolateImageFunction.h>
#include <itkNearestNeighborInterpolateImageFunction.h>
#include <itkResampleImageFilter.h>

#include <cmath>

#include "itk_bridge.h"
#include "voxfit/core/error.h"

namespace voxfit::io {

std::array<std::int64_t, 3> resampled_size(const std::array<std::int64_t, 3>& size,
                                           const std::array<double, 3>& spacing,
                                           const std::array<double, 3>& new_spacing) {
  std::array<std::int64_t, 3> out{};
  for (int i = 0; i < 3; ++i)
    out[i] = std::max<std::int64_t>(
        1, static_cast<std::int64_t>(std::llround(static_cast<double>(size[i]) * spacing[i] / new_spacing[i])));
  return out;
}

Volume resample_to_grid(const Volume& volume, const std::array<std::int64_t, 3>& size, const Geometry& geometry,
                        Interpolation interpolation) {
  try {
    using Filter = itk::ResampleImageFilter<FloatImage, FloatImage>;
    auto filter = Filter::New();
    filter->SetInput(to_itk_image(volume));
    if (interpolation == Interpolation::Linear)
      filter->SetInterpolator(itk::LinearInterpolateImageFunction<FloatImage, double>::New());
    else
      filter->SetInterpolator(itk::NearestNeighborInterpolateImageFunction<FloatImage, double>::New());
    const ItkGrid grid = to_itk_grid(size, geometry);
    filter->SetSize(grid.size);
    filter->SetOutputSpacing(grid.spacing);
    filter->SetOutputOrigin(grid.origin);
    filter->SetOutputDirection(grid.direction);
    filter->SetDefaultPixelValue(0.0f);
    filter->Update();
    Volume out = from_itk_image(filter->GetOutput());
    if (interpolation == Interpolation::Nearest) {
      out.data = out.data.to(volume.data.scalar_type());
      out.pixel_type = volume.pixel_type;
    }
    return out;
  } catch (const itk::ExceptionObject& e) {
    throw DataError(std::string("resampling to ") + format_size(size) + " at spacing " +
                    format_triple(geometry.spacing) + " failed: " + e.GetDescription());
  }
}

}  // namespace voxfit::io
