#pragma once
// What ITK's NIfTI reader hides (private to src/io): nifti1_io silently zero-fills the end of a
// truncated .nii.gz and replaces NaN/Inf floats with 0, so `data check` could never see either.
#include <torch/types.h>

#include <filesystem>

namespace voxfit::io {

/// Throws IoError naming the file if a single-file NIfTI (.nii, or gzipped .nii.gz) cannot hold the
/// `voxel_bytes` its header declares: a plain file shorter than header plus voxels, or more voxels
/// than the compressed size could ever inflate to (a truncated download or a lying header). Called
/// before the voxel buffer is allocated; the exact length of gzipped data is checked while it is
/// inflated (read_nifti_gz_voxels, verify_nifti_gz).
void check_nifti_length(const std::filesystem::path& path, std::uint64_t voxel_bytes);

/// Throws IoError naming the file and field if the header's geometry is unusable: a voxel size
/// (pixdim[1..3]) that is zero, negative or not a number (nifti1_io silently reads it as 1 mm), or a
/// non-finite number in the quaternion or affine the header says to use (ITK aborts the process on
/// those). Run before ITK reads the header; a file that is not a NIfTI-1 header is left to ITK.
void check_nifti_header(const std::filesystem::path& path);

/// Reads the voxels of a gzipped NIfTI-1 file in one pass of zlib, straight into `out`
/// (`voxel_bytes`, as ITK's reader would return them), where ITK's reader would return the stored
/// values unchanged: one scalar component of a plain type, unscaled, 3 or 4 axes. Multi-member
/// gzip files are read whole; non-finite floats stay as stored. Returns false, having read
/// nothing into `out`, where ITK must read the file; throws IoError naming the file if the data is
/// truncated or corrupt (checked to the last member's CRC).
bool read_nifti_gz_voxels(const std::filesystem::path& path, std::uint64_t voxel_bytes, std::size_t component_bytes,
                          char* out);

/// After ITK read a gzipped NIfTI-1 file: inflates it once to check that it holds its header plus
/// the voxels the header declares (every member, to the last CRC) and, when `values` is given
/// (float32 / float64 voxels in file order), puts the file's own non-finite values back; returns
/// how many.
std::int64_t verify_nifti_gz(const std::filesystem::path& path, torch::Tensor* values);

/// Puts the file's own non-finite values back into `values` (the voxels in file order, float32 or
/// float64, as ITK read them) from an uncompressed .nii; returns how many there were. Throws
/// IoError if the data is short.
std::int64_t restore_nifti_nonfinite(const std::filesystem::path& path, torch::Tensor& values);

}  // namespace voxfit::io
