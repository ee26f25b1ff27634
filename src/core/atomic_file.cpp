#include "voxfit/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "voxfit/core/error.h"

namespace voxfit {
namespace fs = std::filesystem;

namespace {

std::string errno_text() { return std::strerror(errno); }

fs::path make_temp_name(const fs::path& path) {
  static std::atomic<unsigned> counter{0};
  return path.parent_path() /
         ("." + path.filename().string() + ".tmp" + std::to_string(::getpid()) + "_" +
          std::to_string(counter++));
}

void fsync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw IoError(path.string() + ": cannot open for sync: " + errno_text());
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw IoError(path.string() + ": cannot sync: " + errno_text());
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

}  // namespace

void write_file_atomic(const fs::path& path, const std::string& content) {
  AtomicPath out(path);
  const int fd = ::open(out.temp().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
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
}

AtomicPath::~AtomicPath() {
  if (!committed_) {
    std::error_code ec;
    fs::remove(temp_, ec);
  }
}

void AtomicPath::commit() {
  if (!fs::exists(temp_)) throw IoError(final_.string() + ": nothing was written");
  fsync_path(temp_);
  std::error_code ec;
  fs::rename(temp_, final_, ec);
  if (ec) throw IoError(final_.string() + ": cannot move the finished file into place: " + ec.message());
  committed_ = true;
}

void append_line_durable(const fs::path& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) throw IoError(path.string() + ": cannot open for append: " + errno_text());
  const std::string record = line + "\n";
  try {
    write_all(fd, record.data(), record.size(), path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw IoError(path.string() + ": cannot sync: " + errno_text());
}

}  // namespace voxfit
