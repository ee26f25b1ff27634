#pragma once
// One writer per output folder. A sweep, plan or training run holds an advisory lock on its output
// folder (flock on DIR/.voxfit.lock) for as long as it writes there; a second voxfit process asking
// for the same folder is refused with one line naming the folder and the holder. The kernel drops
// the lock when the holder dies, however it dies, so `--resume` after `kill -9` works at once.
#include <filesystem>
#include <string>

namespace voxfit {

class FolderLock {
 public:
  /// Creates `dir` if needed and locks it without waiting. Throws IoError naming the folder and the
  /// other process (its pid and command line, as it wrote them into the lock file) when another
  /// process holds it, or naming the folder and the cause when the lock file cannot be made.
  explicit FolderLock(const std::filesystem::path& dir);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

  /// The lock file's name inside a locked folder.
  static constexpr const char* kFileName = ".voxfit.lock";

 private:
  int fd_ = -1;
};

}  // namespace voxfit
