#include "support/test_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace voxfit::test {

namespace {
std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

RunResult run_voxfit(const std::string& args) {
  const fs::path base = fs::temp_directory_path() / ("voxfit_run_" + std::to_string(::getpid()));
  const fs::path out = base.string() + ".out", err = base.string() + ".err";
  const std::string cmd = "'" + voxfit_binary().string() + "' " + args + " >'" + out.string() + "' 2>'" +
                          err.string() + "' </dev/null";
  const int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  fs::remove(out);
  fs::remove(err);
  return r;
}

}  // namespace voxfit::test
