#pragma once
// HDF5 volumes: n-D datasets with the geometry as attributes, and box (hyperslab) reads that touch
// only the chunks a box overlaps. All HDF5 calls of voxfit go through one process-wide lock: the
// library serialises itself anyway (thread-safe builds hold a global lock) and its C++ objects'
// reference counts are not thread-safe.
#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "voxfit/core/volume.h"

namespace voxfit::io {

namespace fs = std::filesystem;

/// Dataset names inside an HDF5 case file (`image` [C, D, H, W] or [D, H, W], `label` [D, H, W]).
struct H5Names {
  std::string image = "image";  ///< intensities; default "image"
  std::string label = "label";  ///< label map; default "label"
};

/// How a dataset is stored.
struct H5DatasetOptions {
  /// Chunk shape (empty: contiguous). Patch reads only touch the chunks a box overlaps.
  std::vector<std::int64_t> chunk;
  /// gzip level 0..9; 0 (the default) stores raw chunks, because decompressing happens under
  /// HDF5's global lock and would serialise the loader's threads.
  int gzip_level = 0;
};

/// A read-only HDF5 file. Every method throws IoError naming the file and dataset.
class H5Reader {
 public:
  /// `chunk_cache_bytes` per open dataset (HDF5's default is 1 MiB, less than one 64^3 float
  /// chunk, so every patch would re-read its chunks from the file).
  explicit H5Reader(const fs::path& file, std::size_t chunk_cache_bytes = 32u << 20);
  ~H5Reader();
  H5Reader(const H5Reader&) = delete;
  H5Reader& operator=(const H5Reader&) = delete;

  const fs::path& path() const { return path_; }
  bool has(const std::string& dataset) const;
  std::vector<std::int64_t> shape(const std::string& dataset) const;
  /// The whole dataset in the tensor dtype matching its stored type (uint16 widens to int32).
  torch::Tensor read(const std::string& dataset) const;
  /// The box [start, start + count) per axis, read by hyperslab.
  torch::Tensor read_box(const std::string& dataset, const std::vector<std::int64_t>& start,
                         const std::vector<std::int64_t>& count) const;
  /// Reads the box into `out` (contiguous, shape == count, any supported dtype: HDF5 converts),
  /// so a loader can fill a batch slot without an extra copy.
  void read_box_into(const std::string& dataset, const std::vector<std::int64_t>& start,
                     const std::vector<std::int64_t>& count, torch::Tensor& out) const;
  /// The geometry attributes of a dataset (spacing, origin, direction), if it has them.
  std::optional<Geometry> geometry(const std::string& dataset) const;
  /// The `pixel_type` attribute of a dataset, if any.
  std::optional<PixelType> pixel_type(const std::string& dataset) const;
  /// An attribute of a dataset or group ("/" for the file).
  std::optional<std::string> string_attribute(const std::string& object, const std::string& name) const;
  std::optional<std::vector<double>> double_attribute(const std::string& object, const std::string& name) const;

 private:
  struct Impl;
  fs::path path_;
  std::unique_ptr<Impl> impl_;
};

/// Writes a new HDF5 file atomically: the file is built in memory, commit() writes it to a temporary
/// file and renames it into place; an uncommitted writer leaves nothing behind.
class H5Writer {
 public:
  explicit H5Writer(const fs::path& file);
  ~H5Writer();
  H5Writer(const H5Writer&) = delete;
  H5Writer& operator=(const H5Writer&) = delete;

  /// Stores a CPU tensor (uint8, int8, int16, int32, int64, float32, float64) as a dataset at the
  /// file's top level.
  void write(const std::string& dataset, const torch::Tensor& data, const H5DatasetOptions& options = {});
  void set_geometry(const std::string& dataset, const Geometry& geometry);
  void set_attribute(const std::string& object, const std::string& name, const std::string& value);
  void set_attribute(const std::string& object, const std::string& name, const std::vector<double>& value);
  void commit();

 private:
  struct Impl;
  fs::path path_;
  std::unique_ptr<Impl> impl_;
};

/// A case stored in one HDF5 file: the image dataset as channels ([D, H, W] is one channel,
/// [C, D, H, W] is C), with its geometry attributes (identity geometry when absent).
Channels read_h5_channels(const fs::path& file, const std::string& dataset);
/// A single 3D dataset as a Volume.
Volume read_h5_volume(const fs::path& file, const std::string& dataset);
/// Runs `read` (HDF5 reads of `file`) first in a forked child process, because HDF5 1.10 still
/// has memory errors on some corrupted files, inside the library: a child that dies of a signal
/// (or of a sanitizer's report), or is still reading after `timeout_s`, becomes the one-line
/// IoError "FILE: not a readable HDF5 volume (the HDF5 library crashed on it: ...)" (or "hung on
/// it ...") instead of taking this process down. Errors that HDF5 reports are left to the caller's
/// own read in this process, which names them. The child has this thread only: HDF5 calls in
/// other threads wait while it forks. With VOXFIT_TRUST_HDF5=1 in the environment the child is
/// skipped.
void survive_h5_read(const fs::path& file, const std::function<void()>& read, double timeout_s = 120);
/// survive_h5_read for an HDF5 case that voxfit did not write (a user's image / label file): one
/// child reads its image channels and its label volume, as read_h5_channels and read_h5_volume
/// will; once per version (size, modification time) of the file in this process, whose verdict
/// later calls repeat.
void survive_h5_case(const fs::path& file, const H5Names& names);

/// Writes `image` channels (same grid) as [C, D, H, W] and, if given, `label` as [D, H, W], both
/// with geometry and pixel type attributes.
void write_h5_case(const fs::path& file, const Channels& image, const Volume* label, const H5Names& names = {});

}  // namespace voxfit::io
