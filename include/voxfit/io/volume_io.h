#pragma once
// Reading and writing volumes through ITK: NIfTI (.nii, .nii.gz), MetaImage (.mha, .mhd),
// NRRD (.nrrd, .nhdr) and DICOM series folders (GDCM). Every failure is an IoError naming the path.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "voxfit/core/volume.h"

namespace voxfit::io {

namespace fs = std::filesystem;

/// What a header says, read without the voxels.
struct ImageInfo {
  unsigned dimension = 0;          ///< axes in the file (3 for a volume; 4 for stacked channels)
  std::vector<std::int64_t> size;  ///< voxels per axis, ITK order (x, y, z[, c])
  unsigned components = 1;         ///< values per voxel (1 unless a vector image)
  PixelType pixel_type = PixelType::Float32;
  Geometry geometry;   ///< of the first three axes
  std::string format;  ///< "NIfTI", "MetaImage", "NRRD", "DICOM"
  /// Channels the file holds: the 4th axis or the vector components (1 for a plain volume).
  std::int64_t channels() const;
  /// The first three sizes as (x, y, z).
  std::array<std::int64_t, 3> size3() const;
};

/// True for the file endings this module reads (.nii, .nii.gz, .mha, .mhd, .nrrd, .nhdr).
bool is_volume_file(const fs::path& path);
/// The file ending as voxfit treats it: ".nii.gz" for gzipped NIfTI, else the extension.
std::string volume_extension(const fs::path& path);

/// Reads the header only (a DICOM folder: its series' first slice plus the slice count).
ImageInfo read_image_info(const fs::path& path);

/// Reads every channel of a file: a 3D volume is one channel; a 4D file (x, y, z, c) or a vector
/// image gives c co-registered channels. A folder is read as a DICOM series; "DIR#UID" picks a
/// series by its Series Instance UID when the folder holds several.
Channels read_channels(const fs::path& path);

/// Reads a single 3D volume; a file with several channels is an IoError.
Volume read_volume(const fs::path& path);

/// Writes a volume in the format its extension names (.nii, .nii.gz, .mha, .mhd, .nrrd, .nhdr)
/// with its geometry and pixel type. `compress` zips MetaImage/NRRD data (.nii.gz always is).
/// The file appears atomically (written beside the target, then renamed).
void write_volume(const fs::path& path, const Volume& volume, bool compress = true);

struct DicomSeries {
  std::string uid;                 ///< Series Instance UID (0020|000e)
  std::vector<std::string> files;  ///< slices ordered by position along the slice normal
};

/// The series in a folder, each with its slices in position order.
std::vector<DicomSeries> list_dicom_series(const fs::path& dir);

/// Reads one series of a DICOM folder (the only one if `series_uid` is empty), slices ordered by
/// their position, intensities after the rescale slope/intercept.
Volume read_dicom_series(const fs::path& dir, const std::string& series_uid = "");

/// Writes `volume` as a DICOM series (one file per slice, IMG0000.dcm, ...) carrying the given
/// Series Instance UID; used to build multi-series folders.
void write_dicom_series(const fs::path& dir, const Volume& volume, const std::string& series_uid);

}  // namespace voxfit::io
