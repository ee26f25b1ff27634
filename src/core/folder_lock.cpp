#include "voxfit/core/folder_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "voxfit/core/error.h"

namespace voxfit {
namespace fs = std::filesystem;

namespace {

// This process's command line, its arguments joined by spaces.
std::string own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!raw.empty() && raw.back() == '\0') raw.pop_back();
  for (char& c : raw)
    if (c == '\0') c = ' ';
  return raw;
}

}  // namespace

FolderLock::FolderLock(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError(dir.string() + ": cannot create the output folder: " + ec.message());
  const fs::path file = dir / kFileName;
  // O_CLOEXEC: processes this one starts (isolated probes, ranks) do not inherit the lock.
  fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw IoError(file.string() + ": cannot open the folder's lock file: " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder;
    if (err == EWOULDBLOCK) {
      std::ifstream in(file);
      std::getline(in, holder);
    }
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw IoError(dir.string() + ": another voxfit process is writing this folder (" +
                    (holder.empty() ? std::string("it has not said which yet") : holder) +
                    "); wait for it to end or choose another output folder");
    throw IoError(file.string() + ": cannot lock the output folder: " + std::strerror(err));
  }
  // Who holds it, for the message a second writer gets. Best effort: the lock itself is the flock.
  std::ostringstream who;
  who << "pid " << ::getpid() << ": " << own_command_line() << "\n";
  const std::string text = who.str();
  if (::ftruncate(fd_, 0) == 0) {
    const ssize_t written = ::pwrite(fd_, text.data(), text.size(), 0);
    (void)written;
  }
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the only descriptor releases the flock
}

}  // namespace voxfit
