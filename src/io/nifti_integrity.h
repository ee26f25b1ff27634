#pragma once
// What ITK's NIfTI reader hides (private to src/io): nifti1_io silently zero-fills the end of a
// truncated .nii.gz and replaces NaN/Inf floats with 0, so `data check` could never see either.
#include <torch/types.h>

#include <filesystem>

namespace voxfit::io {

/// Throws IoError naming the file if a gzipped NIfTI cannot hold `voxel_bytes` of voxel data (the
/// gzip trailer's length field disagrees: a truncated or corrupt download).
void check_nifti_gzip_length(const std::filesystem::path& path, std::uint64_t voxel_bytes);

/// Puts the file's own non-finite values back into `values` (the voxels in file order, float32 or
/// float64, as ITK read them); returns how many there were. Throws IoError if the data is short.
std::int64_t restore_nifti_nonfinite(const std::filesystem::path& path, torch::Tensor& values);

}  // namespace voxfit::io
