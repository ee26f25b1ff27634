#pragma once
// `--nproc N`: voxfit starts its own local ranks, as torchrun --nproc-per-node N would.
#include <string>
#include <vector>

namespace voxfit::dist {

/// A TCP port that was free on 127.0.0.1 a moment ago (for MASTER_PORT).
int free_tcp_port();

/// Runs `argv` (argv[0]: the executable) as `nproc` processes with torchrun's variables set
/// (RANK = LOCAL_RANK = 0..nproc-1, WORLD_SIZE = nproc, MASTER_ADDR = 127.0.0.1, a free
/// MASTER_PORT) and waits for them. When one fails, the others are stopped (SIGTERM). Returns 0
/// when every rank succeeded, else the first failing rank's exit status (128 + signal if killed).
int run_local_ranks(int nproc, const std::vector<std::string>& argv);

}  // namespace voxfit::dist
