#include "voxfit/sweep/isolated_probe.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/error.h"
#include "voxfit/dist/launch.h"

namespace voxfit::sweep {

IsolatedProbe isolated_probe(std::vector<std::string> command, std::filesystem::path scratch) {
  return [command = std::move(command), scratch = std::move(scratch)](std::int64_t batch) {
    static std::atomic<int> count{0};
    const std::filesystem::path file =
        scratch / (".probe-" + std::to_string(::getpid()) + "-" + std::to_string(count++) + ".json");
    auto cmd = command;
    for (const auto& a :
         {std::string("--probe-batch"), std::to_string(batch), std::string("--probe-output"), file.string()})
      cmd.push_back(a);
    std::filesystem::create_directories(scratch);
    std::fflush(stdout);
    // A probe process is never a rank of a data-parallel job, even when its parent is one.
    const int rc = dist::run_processes({cmd}, [](int) {
      for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                            "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"})
        ::unsetenv(v);
    });
    nlohmann::json out;
    {
      std::ifstream in(file);
      if (in) out = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    }
    std::error_code ignored;
    std::filesystem::remove(file, ignored);
    const std::string what = "isolated probe at batch " + std::to_string(batch);
    if (rc != 0) throw Error(what + ": its process failed (exit status " + std::to_string(rc) + ")");
    if (!out.is_object()) throw Error(what + ": its process wrote no result to " + file.string());
    if (out.contains("unsupported")) throw UnsupportedError(out["unsupported"].get<std::string>());
    return out;
  };
}

void answer_isolated_probe(std::int64_t batch, const std::filesystem::path& output,
                           const std::function<nlohmann::json(std::int64_t batch)>& probe) {
  nlohmann::json out;
  try {
    out = probe(batch);
  } catch (const UnsupportedError& e) {
    out = {{"unsupported", e.what()}};
  }
  write_file_atomic(output, out.dump() + "\n");
}

}  // namespace voxfit::sweep
