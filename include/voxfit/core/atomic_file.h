#pragma once
// Results and checkpoints are written to a temporary file beside the target and renamed into
// place, so a reader (or a crash) never sees a half-written file.
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

namespace voxfit {

/// Writes `content` to `path` atomically (temp file in the same folder, fsync, rename).
/// Throws IoError naming the path on any failure; the previous file, if any, is left intact.
void write_file_atomic(const std::filesystem::path& path, const std::string& content);

/// A temporary path beside `path` for writers that need a file name (torch::save, HDF5):
/// write there, then call commit(); if the object dies uncommitted the temp file is removed.
class AtomicPath {
 public:
  explicit AtomicPath(std::filesystem::path final_path);
  ~AtomicPath();
  AtomicPath(const AtomicPath&) = delete;
  AtomicPath& operator=(const AtomicPath&) = delete;

  const std::filesystem::path& temp() const { return temp_; }
  const std::filesystem::path& final_path() const { return final_; }
  /// fsyncs the temp file, renames it over the final path and fsyncs the folder.
  void commit();

 private:
  std::filesystem::path final_;
  std::filesystem::path temp_;
  bool committed_ = false;
};

/// Removes the temp files of AtomicPath writers in `dir` whose process is gone (killed before their
/// rename): a resumed run cleans what the killed one left, even files it will not write again.
void remove_stale_temporaries(const std::filesystem::path& dir);

/// Moves a finished file into place so that a power loss cannot lose the move: fsyncs `from`,
/// renames it to `to`, then fsyncs the folder of `to` (a rename is an entry of that folder, and
/// only the folder's fsync makes it durable). Throws IoError naming `to` on failure.
void rename_durable(const std::filesystem::path& from, const std::filesystem::path& to);

/// The system calls through which every durable write goes (atomic writes, rename_durable,
/// durable appends), so a test can record their order. Each has the POSIX signature.
struct FileSyscalls {
  int (*open)(const char* path, int flags, unsigned mode);
  int (*fsync)(int fd);
  int (*rename)(const char* from, const char* to);
};
/// The table in use; tests swap entries for recording wrappers and restore them.
FileSyscalls& file_syscalls();

/// Appends one line (a '\n' is added) with a single write and fsync (and, when the append created
/// the file, an fsync of its folder): a journal entry is either
/// whole or, if the process dies mid-write, a truncated last line that readers skip and the next
/// append cuts off. A failed write (disk full) takes its partial bytes back before throwing.
void append_line_durable(const std::filesystem::path& path, const std::string& line);

/// Removes `path` and, for a folder, everything under it, without following symbolic links;
/// returns how many entries it removed (0 when `path` does not exist). What std::filesystem's
/// remove_all does, through POSIX nftw instead: PyTorch's pip wheels export their own statically
/// linked copy of remove_all from libtorch (pytorch/pytorch#133437), which crashed voxfit's tests
/// on the GPU machine with a call through a null pointer. The first overload throws IoError
/// naming the path; the second reports in `ec` and never throws.
std::uintmax_t remove_tree(const std::filesystem::path& path);
std::uintmax_t remove_tree(const std::filesystem::path& path, std::error_code& ec) noexcept;

}  // namespace voxfit
