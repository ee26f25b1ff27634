#pragma once
// Where this process sits in a data-parallel job, read from the variables torchrun and Slurm set.
#include <cstdint>
#include <functional>
#include <string>

namespace voxfit::dist {

struct RankInfo {
  int rank = 0;        ///< global rank, 0..world_size-1
  int world_size = 1;  ///< processes in the job (one per GPU)
  int local_rank = 0;  ///< rank on this host: the CUDA device index it uses
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  /// "single" (no variables), "torchrun" (RANK/WORLD_SIZE/...), "slurm" (SLURM_PROCID/...).
  std::string source = "single";
  bool distributed() const { return world_size > 1; }
  bool is_main() const { return rank == 0; }
};

/// Looks a variable up; the default reads the process environment (tests pass a map).
using EnvLookup = std::function<const char*(const char*)>;

/// torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; else Slurm's SLURM_PROCID,
/// SLURM_NTASKS, SLURM_LOCALID (MASTER_ADDR/MASTER_PORT still read when set; MASTER_ADDR defaults
/// to 127.0.0.1 for a one-node job and is required for more nodes); else a single process.
/// Throws ConfigError naming the variable for a missing, non-numeric or inconsistent value.
RankInfo rank_from_environment(const EnvLookup& env = {});

}  // namespace voxfit::dist
