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

namespace {
// A verdict this long fits the pipe's buffer: the child's one write never waits for the parent.
constexpr std::size_t kMaxVerdict = 4096;
}  // namespace

std::string verdict_in_child(const std::string& what, const std::function<std::string()>& work, double timeout_s,
                             const std::function<std::shared_ptr<void>()>& fork_guard,
                             const std::function<void()>& in_child) {
  // The child holds the write end of a pipe and nothing else does: the parent reads its verdict
  // and sees the end of the pipe the moment the child ends, however it ends.
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
      std::string verdict;
      try {
        verdict = work();
      } catch (...) {
        // An error the reader reported: the parent's own read names it.
      }
      verdict.resize(std::min(verdict.size(), kMaxVerdict));
      if (!verdict.empty() && ::write(done[1], verdict.data(), verdict.size()) < 0) ::_exit(3);
      ::_exit(0);
    }
  }
  ::close(done[1]);
  if (pid < 0) {
    ::close(done[0]);
    throw IoError(what + "could not be checked: no process to check it in: " + std::strerror(errno) + ")");
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::string verdict;
  bool ended = false;
  while (!ended) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{done[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left.count() + 1, 1 << 30))) <= 0) continue;
    char buffer[4096];
    const ssize_t n = ::read(done[0], buffer, sizeof buffer);
    if (n > 0)
      verdict.append(buffer, static_cast<std::size_t>(n));
    else if (n == 0 || errno != EINTR)
      ended = true;  // the end of the pipe: the child is gone
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
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return verdict;
  const std::string how = WIFSIGNALED(status)
                              ? "signal " + std::to_string(WTERMSIG(status)) + ", " + ::strsignal(WTERMSIG(status))
                              : "exit status " + std::to_string(WEXITSTATUS(status));
  throw IoError(what + "crashed on it: " + how + ")");
}

void survive_in_child(const std::string& what, const std::function<void()>& work, double timeout_s,
                      const std::function<std::shared_ptr<void>()>& fork_guard, const std::function<void()>& in_child) {
  (void)verdict_in_child(
      what,
      [&] {
        work();
        return std::string();
      },
      timeout_s, fork_guard, in_child);
}

}  // namespace voxfit::core
