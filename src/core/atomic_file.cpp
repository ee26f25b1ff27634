#include "voxfit/core/atomic_file.h"

#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "voxfit/core/error.h"

namespace voxfit {
namespace fs = std::filesystem;

namespace {

std::string errno_text() { return std::strerror(errno); }

int open_real(const char* path, int flags, unsigned mode) { return ::open(path, flags, static_cast<mode_t>(mode)); }

int open_fd(const fs::path& path, int flags, unsigned mode = 0) {
  int fd;
  do {
    fd = file_syscalls().open(path.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

fs::path make_temp_name(const fs::path& path) {
  static std::atomic<unsigned> counter{0};
  return path.parent_path() /
         ("." + path.filename().string() + ".tmp" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
}

void fsync_path(const fs::path& path) {
  const int fd = open_fd(path, O_RDONLY);
  if (fd < 0) throw IoError(path.string() + ": cannot open for sync: " + errno_text());
  const int rc = file_syscalls().fsync(fd);
  ::close(fd);
  if (rc != 0) throw IoError(path.string() + ": cannot sync: " + errno_text());
}

fs::path folder_of(const fs::path& path) { return path.parent_path().empty() ? fs::path(".") : path.parent_path(); }

// A folder's fsync makes the entries created or renamed in it durable (ext4, xfs: the rename
// itself is only in the journal once the folder is synced). `for_file` names the file in errors.
void fsync_folder(const fs::path& dir, const fs::path& for_file) {
  const int fd = open_fd(dir, O_RDONLY | O_DIRECTORY);
  if (fd < 0) throw IoError(for_file.string() + ": cannot open its folder for sync: " + errno_text());
  const int rc = file_syscalls().fsync(fd);
  ::close(fd);
  // Some file systems (and /proc-like ones) refuse fsync on a folder; the data is as durable as
  // they can make it.
  if (rc != 0 && errno != EINVAL && errno != ENOTSUP)
    throw IoError(for_file.string() + ": cannot sync its folder: " + errno_text());
}

void write_all(int fd, const char* data, std::size_t size, const fs::path& path) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError(path.string() + ": write failed: " + errno_text());
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

// The writer's PID in a temp name ".NAME.tmpPID_N" (`prefix` is ".NAME.tmp", or "." for any NAME),
// or 0 where `name` is not one.
long temp_owner(const std::string& name, const std::string& prefix) {
  if (name.size() < 2 || name[0] != '.' || name.compare(0, prefix.size(), prefix) != 0) return 0;
  const auto tmp = name.rfind(".tmp");
  if (tmp == std::string::npos || tmp == 0) return 0;
  if (prefix.size() > 1 && tmp + 4 != prefix.size()) return 0;  // NAME's own temp, not NAME.x's
  const char* digits = name.c_str() + tmp + 4;
  char* end = nullptr;
  const long pid = std::strtol(digits, &end, 10);
  return end != digits && *end == '_' ? pid : 0;
}

// A writer killed between creating its temp file and renaming it (kill -9, power loss) leaves
// ".NAME.tmpPID_N" behind; these go where their process is gone.
void remove_dead_temps(const fs::path& dir, const std::string& prefix) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const long pid = temp_owner(it->path().filename().string(), prefix);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
}

// The next writer of NAME removes the dead ones of NAME.
void remove_stale_temps(const fs::path& final_path) {
  remove_dead_temps(folder_of(final_path), "." + final_path.filename().string() + ".tmp");
}

}  // namespace

FileSyscalls& file_syscalls() {
  static FileSyscalls calls{open_real, ::fsync, ::rename};
  return calls;
}

void remove_stale_temporaries(const fs::path& dir) { remove_dead_temps(dir, "."); }

void rename_durable(const fs::path& from, const fs::path& to) {
  fsync_path(from);
  if (file_syscalls().rename(from.c_str(), to.c_str()) != 0)
    throw IoError(to.string() + ": cannot move the finished file into place: " + errno_text());
  fsync_folder(folder_of(to), to);
}

void write_file_atomic(const fs::path& path, const std::string& content) {
  AtomicPath out(path);
  const int fd = open_fd(out.temp(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw IoError(path.string() + ": cannot create: " + errno_text());
  try {
    write_all(fd, content.data(), content.size(), path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) throw IoError(path.string() + ": write failed: " + errno_text());
  out.commit();
}

AtomicPath::AtomicPath(fs::path final_path) : final_(std::move(final_path)), temp_(make_temp_name(final_)) {
  if (!final_.parent_path().empty()) {
    std::error_code ec;
    fs::create_directories(final_.parent_path(), ec);
    if (ec) throw IoError(final_.parent_path().string() + ": cannot create folder: " + ec.message());
  }
  remove_stale_temps(final_);
}

AtomicPath::~AtomicPath() {
  if (!committed_) {
    std::error_code ec;
    fs::remove(temp_, ec);
  }
}

void AtomicPath::commit() {
  if (!fs::exists(temp_)) throw IoError(final_.string() + ": nothing was written");
  rename_durable(temp_, final_);
  committed_ = true;
}

// Cuts a torn last line (one without its '\n', left by a process killed mid-append) off the file,
// so the next entry starts a line of its own instead of being glued to the fragment.
void drop_torn_tail(int fd, const fs::path& path) {
  const off_t size = ::lseek(fd, 0, SEEK_END);
  if (size <= 0) return;
  char last = '\n';
  if (::pread(fd, &last, 1, size - 1) != 1) throw IoError(path.string() + ": cannot read: " + errno_text());
  if (last == '\n') return;
  off_t end = size;
  char buf[4096];
  while (end > 0) {
    const off_t from = std::max<off_t>(0, end - static_cast<off_t>(sizeof buf));
    const ssize_t n = ::pread(fd, buf, static_cast<std::size_t>(end - from), from);
    if (n <= 0) throw IoError(path.string() + ": cannot read: " + errno_text());
    for (ssize_t i = n - 1; i >= 0; --i)
      if (buf[i] == '\n') {
        end = from + i + 1;
        if (::ftruncate(fd, end) != 0) throw IoError(path.string() + ": cannot cut a torn last line: " + errno_text());
        return;
      }
    end = from;
  }
  if (::ftruncate(fd, 0) != 0) throw IoError(path.string() + ": cannot cut a torn last line: " + errno_text());
}

void append_line_durable(const fs::path& path, const std::string& line) {
  int fd = open_fd(path, O_RDWR);
  const bool created = fd < 0 && errno == ENOENT;
  if (created) fd = open_fd(path, O_RDWR | O_CREAT, 0644);
  if (fd < 0) throw IoError(path.string() + ": cannot open for append: " + errno_text());
  const std::string record = line + "\n";
  off_t start = -1;
  try {
    drop_torn_tail(fd, path);
    start = ::lseek(fd, 0, SEEK_END);
    if (start < 0) throw IoError(path.string() + ": cannot seek: " + errno_text());
    write_all(fd, record.data(), record.size(), path);
  } catch (...) {
    // A write that failed part-way (disk full) must not leave half an entry behind.
    if (start >= 0 && ::ftruncate(fd, start) != 0) {
      // The error being thrown already says the append failed.
    }
    ::close(fd);
    throw;
  }
  const int rc = file_syscalls().fsync(fd);
  ::close(fd);
  if (rc != 0) throw IoError(path.string() + ": cannot sync: " + errno_text());
  if (created) fsync_folder(folder_of(path), path);
}

namespace {
// nftw's callback takes no context: the count and the first failure of the walk in progress on
// this thread.
thread_local std::uintmax_t removed_entries = 0;
thread_local int remove_errno = 0;

int remove_entry(const char* path, const struct stat*, int type, struct FTW*) {
  // FTW_DNR (a folder that cannot be read) is removed like any folder: rmdir then reports why.
  const bool folder = type == FTW_DP || type == FTW_D || type == FTW_DNR;
  if ((folder ? ::rmdir(path) : ::unlink(path)) != 0) {
    if (errno == ENOENT) return 0;  // gone already (a concurrent remover)
    remove_errno = errno;
    return 1;  // stops the walk
  }
  ++removed_entries;
  return 0;
}
}  // namespace

std::uintmax_t remove_tree(const fs::path& path, std::error_code& ec) noexcept {
  ec.clear();
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) ec.assign(errno, std::generic_category());
    return 0;
  }
  removed_entries = 0;
  remove_errno = 0;
  // Depth first (contents before their folder), physical (a link is removed, not followed).
  const int rc = ::nftw(path.c_str(), remove_entry, 32, FTW_DEPTH | FTW_PHYS);
  if (rc != 0) ec.assign(remove_errno != 0 ? remove_errno : errno, std::generic_category());
  return removed_entries;
}

std::uintmax_t remove_tree(const fs::path& path) {
  std::error_code ec;
  const std::uintmax_t n = remove_tree(path, ec);
  if (ec) throw IoError(path.string() + ": cannot remove: " + ec.message());
  return n;
}

}  // namespace voxfit
