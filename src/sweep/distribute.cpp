#include "voxfit/sweep/distribute.h"

#include <cstdio>
#include <sstream>

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/error.h"
#include "voxfit/core/runtime.h"
#include "voxfit/dist/launch.h"
#include "voxfit/sweep/journal.h"

namespace voxfit::sweep {

namespace fs = std::filesystem;

std::string shell_quote(const std::string& text) {
  std::string q = "'";
  for (char c : text) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

fs::path write_slurm_array(const fs::path& out_dir, std::size_t points, const PointCommand& command) {
  const fs::path dir = fs::absolute(out_dir);
  fs::create_directories(dir / "logs");
  std::ostringstream sh;
  sh << "#!/bin/bash\n"
     << "# Written by `voxfit sweep --emit-slurm`: " << points << " sweep points, one per array task, each\n"
     << "# journalled in its own folder. Submit: sbatch " << (dir / "sweep.sbatch").string() << "\n"
     << "# (add --partition/--account there or on sbatch's command line); when every task has finished:\n"
     << "#   voxfit sweep --merge " << dir.string() << "\n"
     << "#SBATCH --job-name=voxfit-sweep\n"
     << "#SBATCH --array=0-" << points - 1 << "\n"
     << "#SBATCH --ntasks=1\n#SBATCH --gpus-per-task=1\n#SBATCH --cpus-per-task=8\n"
     << "#SBATCH --chdir=" << fs::current_path().string() << "\n"
     << "#SBATCH --output=" << (dir / "logs" / "%A_%a.log").string() << "\n"
     << "set -euo pipefail\n"
     << "exec " << shell_quote(fs::read_symlink("/proc/self/exe").string());
  const auto cmd = command("SHARD", "OUT", /*keep_device=*/true);
  for (size_t i = 1; i < cmd.size(); ++i) {
    if (cmd[i] == "SHARD")
      sh << " \"$SLURM_ARRAY_TASK_ID/" << points << "\"";
    else if (cmd[i] == "OUT")
      sh << " \"" << (dir / "points").string() << "/$SLURM_ARRAY_TASK_ID\"";
    else
      sh << " " << shell_quote(cmd[i]);
  }
  sh << "\n";
  const fs::path script = dir / "sweep.sbatch";
  write_file_atomic(script, sh.str());
  fs::permissions(script, fs::perms::owner_exec | fs::perms::group_exec, fs::perm_options::add);
  return script;
}

std::vector<PointResult> run_parallel(const fs::path& dir, int n, bool on_gpus, const PointCommand& command) {
  if (n < 1) throw ConfigError("--parallel: expected 1 or more, got " + std::to_string(n));
  if (on_gpus && n > static_cast<int>(cuda_devices().size()))
    throw ConfigError("--parallel " + std::to_string(n) + ": there are only " + std::to_string(cuda_devices().size()) +
                      " GPU(s) (use --device cpu to run CPU points side by side)");
  std::vector<std::vector<std::string>> commands;
  for (int g = 0; g < n; ++g) {
    auto cmd = command(std::to_string(g) + "/" + std::to_string(n),
                       (fs::absolute(dir) / "points" / ("gpu" + std::to_string(g))).string(), /*keep_device=*/false);
    cmd.push_back("--device");
    cmd.push_back(on_gpus ? "cuda:" + std::to_string(g) : "cpu");
    commands.push_back(cmd);
  }
  std::fflush(stdout);
  if (const int rc = dist::run_processes(commands); rc != 0)
    throw Error("--parallel: a point process failed (exit status " + std::to_string(rc) +
                "); its journal keeps "
                "what it finished, and the same command resumes");
  return merge_journals(point_journals(dir), dir);
}

}  // namespace voxfit::sweep
