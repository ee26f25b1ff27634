#include "voxfit/io/library_versions.h"

#include <H5public.h>
#include <itkVersion.h>

namespace voxfit::io {

std::string itk_version() { return itk::Version::GetITKVersion(); }

std::string hdf5_version() {
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

}  // namespace voxfit::io
