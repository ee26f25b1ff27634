#include "voxfit/dist/rank.h"

#include <cstdlib>

#include "voxfit/core/error.h"

namespace voxfit::dist {

namespace {

int parse_int(const EnvLookup& env, const char* name, int min, int max) {
  const char* text = env(name);
  if (!text || !*text) throw ConfigError(std::string("environment: ") + name + " is not set");
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (*end != '\0' || v < min || v > max)
    throw ConfigError(std::string("environment: ") + name + "='" + text + "': expected an integer in [" +
                      std::to_string(min) + ", " + std::to_string(max) + "]");
  return static_cast<int>(v);
}

}  // namespace

RankInfo rank_from_environment(const EnvLookup& lookup) {
  const EnvLookup env = lookup ? lookup : EnvLookup([](const char* n) { return std::getenv(n); });
  const auto set = [&](const char* n) {
    const char* v = env(n);
    return v && *v;
  };
  RankInfo r;
  if (set("WORLD_SIZE") || set("RANK")) {
    r.source = "torchrun";
    r.world_size = parse_int(env, "WORLD_SIZE", 1, 1 << 16);
    r.rank = parse_int(env, "RANK", 0, r.world_size - 1);
    r.local_rank = set("LOCAL_RANK") ? parse_int(env, "LOCAL_RANK", 0, r.world_size - 1) : r.rank;
    if (r.world_size > 1 && !set("MASTER_ADDR")) throw ConfigError("environment: MASTER_ADDR is not set");
  } else if (set("SLURM_PROCID") && set("SLURM_NTASKS")) {
    r.source = "slurm";
    r.world_size = parse_int(env, "SLURM_NTASKS", 1, 1 << 16);
    r.rank = parse_int(env, "SLURM_PROCID", 0, r.world_size - 1);
    r.local_rank = set("SLURM_LOCALID") ? parse_int(env, "SLURM_LOCALID", 0, r.world_size - 1) : r.rank;
    const bool one_node = !set("SLURM_NNODES") || parse_int(env, "SLURM_NNODES", 1, 1 << 16) == 1;
    if (r.world_size > 1 && !one_node && !set("MASTER_ADDR"))
      throw ConfigError(
          "environment: MASTER_ADDR is not set (a multi-node Slurm job must export the first node's "
          "address, e.g. MASTER_ADDR=$(scontrol show hostnames $SLURM_NODELIST | head -1))");
  } else {
    return r;
  }
  if (set("MASTER_ADDR")) r.master_addr = env("MASTER_ADDR");
  if (set("MASTER_PORT")) r.master_port = parse_int(env, "MASTER_PORT", 1, 65535);
  return r;
}

}  // namespace voxfit::dist
