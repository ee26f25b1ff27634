#pragma once
// A sweep spread over processes: a Slurm job array with one grid point per task (--emit-slurm), or
// N local processes, one per GPU (--parallel). Each process journals into DIR/points/<name>, and
// merge_journals() (journal.h) joins them.
#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "voxfit/sweep/sweep.h"

namespace voxfit::sweep {

/// The command line of one point process: voxfit's arguments (from "voxfit" on) for a sweep of the
/// same grid on the prepared cache running only shard `shard` ("I/N") into `output`; with
/// `keep_device` false the caller appends its own --device. The CLI builds it from its own command line.
using PointCommand =
    std::function<std::vector<std::string>(const std::string& shard, const std::string& output, bool keep_device)>;

/// `text` quoted for a POSIX shell.
std::string shell_quote(const std::string& text);

/// --emit-slurm: writes `dir`/sweep.sbatch, a Slurm job array of `points` tasks, task I running
/// shard I/points into dir/points/I (logs in dir/logs), started from the current folder with this
/// executable. Returns the script's path; nothing runs.
std::filesystem::path write_slurm_array(const std::filesystem::path& dir, std::size_t points,
                                        const PointCommand& command);

/// --parallel N: runs shard g/N on process g (cuda:g, or all on the CPU when `on_gpus` is false),
/// each journalling into dir/points/gpuG, waits for them and merges their journals into `dir`.
/// Returns the merged entries; throws Error when a process failed, ConfigError when there are fewer
/// GPUs than N.
std::vector<PointResult> run_parallel(const std::filesystem::path& dir, int n, bool on_gpus,
                                      const PointCommand& command);

}  // namespace voxfit::sweep
