#include "voxfit/dist/launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "voxfit/core/error.h"

namespace voxfit::dist {

int free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw Error(std::string("cannot open a socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  if (!ok) throw Error(std::string("cannot find a free TCP port: ") + std::strerror(errno));
  return ntohs(addr.sin_port);
}

int run_processes(const std::vector<std::vector<std::string>>& commands, const std::function<void(int)>& in_child) {
  std::vector<pid_t> pids;
  std::fflush(nullptr);
  for (std::size_t i = 0; i < commands.size(); ++i) {
    if (commands[i].empty()) throw Error("run_processes: an empty command");
    const pid_t pid = ::fork();
    if (pid < 0) {
      for (pid_t p : pids) ::kill(p, SIGTERM);
      throw Error("cannot start process " + std::to_string(i) + ": " + std::strerror(errno));
    }
    if (pid == 0) {
      if (in_child) in_child(static_cast<int>(i));
      std::vector<char*> args;
      for (const auto& a : commands[i]) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv("/proc/self/exe", args.data());
      std::fprintf(stderr, "voxfit: error: process %zu: cannot run %s: %s\n", i, commands[i][0].c_str(),
                   std::strerror(errno));
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  int result = 0;
  std::size_t running = pids.size();
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    bool ours = false;
    for (auto& p : pids)
      if (p == pid) {
        p = 0;
        ours = true;
      }
    if (!ours) continue;
    --running;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && result == 0) {
      result = code;
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGTERM);
    }
  }
  return result;
}

int run_local_ranks(int nproc, const std::vector<std::string>& argv) {
  if (nproc < 1) throw ConfigError("--nproc: expected 1 or more, got " + std::to_string(nproc));
  if (argv.empty()) throw Error("run_local_ranks: no command");
  const std::string port = std::to_string(free_tcp_port()), world = std::to_string(nproc);
  return run_processes(std::vector<std::vector<std::string>>(static_cast<std::size_t>(nproc), argv), [&](int r) {
    const std::string rank = std::to_string(r);
    ::setenv("RANK", rank.c_str(), 1);
    ::setenv("LOCAL_RANK", rank.c_str(), 1);
    ::setenv("WORLD_SIZE", world.c_str(), 1);
    ::setenv("LOCAL_WORLD_SIZE", world.c_str(), 1);
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", port.c_str(), 1);
  });
}

}  // namespace voxfit::dist
