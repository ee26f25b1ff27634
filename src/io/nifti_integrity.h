#pragma once
// What ITK's NIfTI reader hides (private to src/io): nifti1_io silently zero-fills the end of a
// truncated .nii.gz and replaces NaN/Inf floats with 0, so `data check` could never see either.
#include <torch/types.h>

#include <filesystem>

namespace voxfit::io {

/// Throws IoError naming the file if a single-file NIfTI (.nii, or gzipped .nii.gz) cannot hold the
/// `voxel_bytes` its header declares: a plain file shorter than header plus voxels, a gzip trailer
/// whose length field disagrees, or more voxels than the compressed size could ever inflate to (a
/// truncated download or a lying header). Called before the voxel buffer is allocated.
void check_nifti_length(const std::filesystem::path& path, std::uint64_t voxel_bytes);

/// Throws IoError naming the file and field if the header's geometry is unusable: a voxel size
/// (pixdim[1..3]) that is zero, negative or not a number (nifti1_io silently reads it as 1 mm), or a
/// non-finite number in the quaternion or affine the header says to use (ITK aborts the process on
/// those). Run before ITK reads the header; a file that is not a NIfTI-1 header is left to ITK.
void check_nifti_header(const std::filesystem::path& path);

/// Puts the file's own non-finite values back into `values` (the voxels in file order, float32 or
/// float64, as ITK read them); returns how many there were. Throws IoError if the data is short.
std::int64_t restore_nifti_nonfinite(const std::filesystem::path& path, torch::Tensor& values);

}  // namespace voxfit::io
