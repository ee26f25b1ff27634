#include "support/test_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include <sstream>
#include "voxfit/data/preprocess.h"
#include "voxfit/io/dataset.h"
#include "voxfit/io/volume_io.h"
#include "voxfit/memory/budget.h"

namespace voxfit::test {

namespace {
// The test binaries run with the host allocator settings of voxfit's main (cli::run).
[[maybe_unused]] const bool host_allocator_configured = memory::default_host_allocator_settings();

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

fs::path ct_dataset_manifest() {
  static const fs::path manifest = [] {
    const fs::path root = fs::temp_directory_path() / ("voxfit_ct_dataset_" + std::to_string(::getpid()));
    remove_tree(root);
    fs::create_directories(root / "labelsTr");
    Volume seg = io::read_volume(totalseg_dir() / "example_seg.nii.gz");
    auto counts = torch::bincount(seg.data.flatten().to(torch::kLong));
    counts[0] = 0;
    const auto top = std::get<1>(counts.topk(3));
    auto reduced = torch::zeros_like(seg.data);
    for (int k = 0; k < 3; ++k) reduced.masked_fill_(seg.data == top[k].item<int64_t>(), k + 1);
    seg.data = reduced;
    io::write_volume(root / "labelsTr" / "ct_0.nii.gz", seg);
    const nlohmann::json m{
        {"name", "ct3"},
        {"modality", {{"0", "CT"}}},
        {"labels", {{"0", "background"}, {"1", "organ1"}, {"2", "organ2"}, {"3", "organ3"}}},
        {"training",
         {{{"image", (totalseg_dir() / "example_ct_sm.nii.gz").string()}, {"label", "./labelsTr/ct_0.nii.gz"}}}}};
    std::ofstream(root / "dataset.json") << m.dump(2);
    return root / "dataset.json";
  }();
  return manifest;
}

fs::path prepared_ct_cache() {
  static const fs::path cache = [] {
    const fs::path dir = ct_dataset_manifest().parent_path() / "cache";
    data::prepare_dataset(io::load_dataset(ct_dataset_manifest()), dir);
    return dir;
  }();
  return cache;
}

RunResult run_voxfit(const std::string& args) { return run_command("'" + voxfit_binary().string() + "' " + args); }

RunResult run_command(const std::string& command) {
  const fs::path base = fs::temp_directory_path() / ("voxfit_run_" + std::to_string(::getpid()));
  const fs::path out = base.string() + ".out", err = base.string() + ".err";
  const std::string cmd = command + " >'" + out.string() + "' 2>'" + err.string() + "' </dev/null";
  const int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  fs::remove(out);
  fs::remove(err);
  return r;
}

double row_error_percent(const std::string& out, const std::string& component) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  " + component + " ", 0) != 0) continue;
    const std::string last = line.substr(line.find_last_of(' ') + 1);
    EXPECT_EQ(last.back(), '%') << line;
    return std::strtod(last.c_str(), nullptr);
  }
  ADD_FAILURE() << "no row '" << component << "' in\n" << out;
  return 1e9;
}

std::optional<std::string> python_with(const std::string& modules) {
  std::string path = (source_dir() / ".shared-data" / "peers").string() + ":" +
                     (source_dir().parent_path() / "shared" / "peers").string();
  if (const char* env = std::getenv("PYTHONPATH")) path += std::string(":") + env;
  const char* chosen = std::getenv("VOXFIT_PYTHON");
  const std::string prefix = "PYTHONPATH='" + path + "' " + (chosen && *chosen ? chosen : "python3");
  if (std::system((prefix + " -c 'import " + modules + "' >/dev/null 2>&1").c_str()) != 0) return std::nullopt;
  return prefix;
}

}  // namespace voxfit::test
