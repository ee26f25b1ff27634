#pragma once
// `--nproc N`: voxfit starts its own local ranks, as torchrun --nproc-per-node N would.
#include <functional>
#include <string>
#include <vector>

namespace voxfit::dist {

/// A TCP port that was free on 127.0.0.1 a moment ago (for MASTER_PORT).
int free_tcp_port();

/// Runs each command (argv[0] is shown in errors; the executable is always voxfit itself) as its
/// own process and waits for them; `in_child(i)`, if set, runs in child i before it starts (e.g. to
/// set its environment). When one fails, the others are stopped (SIGTERM). Returns 0 when every
/// process succeeded, else the first failure's exit status (128 + signal if killed).
int run_processes(const std::vector<std::vector<std::string>>& commands, const std::function<void(int)>& in_child = {});

/// Runs `argv` (argv[0]: the executable) as `nproc` processes with torchrun's variables set
/// (RANK = LOCAL_RANK = 0..nproc-1, WORLD_SIZE = nproc, MASTER_ADDR = 127.0.0.1, a free
/// MASTER_PORT) and waits for them. When one fails, the others are stopped (SIGTERM). Returns 0
/// when every rank succeeded, else the first failing rank's exit status (128 + signal if killed).
int run_local_ranks(int nproc, const std::vector<std::string>& argv);

}  // namespace voxfit::dist
