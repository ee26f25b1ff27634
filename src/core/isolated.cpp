#include "voxfit/core/isolated.h"

#include <ATen/Parallel.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "voxfit/core/error.h"

namespace voxfit::core {

void survive_in_child(const std::string& what, const std::function<void()>& work, double timeout_s,
                      const std::function<std::shared_ptr<void>()>& fork_guard, const std::function<void()>& in_child) {
  // The child holds the write end of a pipe and nothing else does: the parent's poll wakes the
  // moment the child ends, however it ends.
  int done[2];
  if (::pipe2(done, O_CLOEXEC) != 0)
    throw IoError(what + "could not be checked: no process to check it in: " + std::strerror(errno) + ")");
  pid_t pid;
  {
    const std::shared_ptr<void> guard = fork_guard ? fork_guard() : nullptr;
    std::fflush(nullptr);
    pid = ::fork();
    if (pid == 0) {
      // Only this thread exists in the child. Torch's thread pool does not survive a fork either:
      // tensor work stays on this thread.
      ::close(done[0]);
      if (in_child) in_child();
      const int null = ::open("/dev/null", O_WRONLY);
      if (null >= 0) {
        ::dup2(null, STDOUT_FILENO);
        ::dup2(null, STDERR_FILENO);
      }
      at::set_num_threads(1);
      try {
        work();
      } catch (...) {
        // An error the reader reported: the parent's own read names it.
      }
      ::_exit(0);
    }
  }
  ::close(done[1]);
  if (pid < 0) {
    ::close(done[0]);
    throw IoError(what + "could not be checked: no process to check it in: " + std::strerror(errno) + ")");
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool ended = false;
  while (!ended) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{done[0], POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left.count() + 1, 1 << 30)));
    ended = r > 0;
  }
  ::close(done[0]);
  int status = 0;
  if (!ended) {
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", timeout_s);
    throw IoError(what + "hung on it: still reading after " + seconds + " s)");
  }
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw IoError(what + "could not be checked: lost its process: " + std::strerror(errno) + ")");
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  const std::string how = WIFSIGNALED(status)
                              ? "signal " + std::to_string(WTERMSIG(status)) + ", " + ::strsignal(WTERMSIG(status))
                              : "exit status " + std::to_string(WEXITSTATUS(status));
  throw IoError(what + "crashed on it: " + how + ")");
}

}  // namespace voxfit::core
