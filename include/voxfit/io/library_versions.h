#pragma once
#include <string>

namespace voxfit::io {

/// ITK's version ("5.2.1").
std::string itk_version();
/// HDF5's library version ("1.10.8").
std::string hdf5_version();

}  // namespace voxfit::io
