#pragma once
// What every voxfit test may use: the real test volumes, the voxfit binary, a scratch folder,
// and running the binary as a user would.
#include <gtest/gtest.h>
#include <torch/types.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "voxfit/core/atomic_file.h"

namespace voxfit::test {

namespace fs = std::filesystem;

inline fs::path source_dir() { return VOXFIT_TEST_SOURCE_DIR; }
/// The real TotalSegmentator volumes (Apache-2.0), shipped with the project's tests.
inline fs::path totalseg_dir() { return source_dir() / "tests" / "volumes" / "totalsegmentator"; }
/// Debian's demo MRI (insighttoolkit5-examples), 7 classes on the same grid.
/// VOXFIT_DEMO_MRI_DIR overrides (the GPU machine has no Debian packages).
inline fs::path demo_mri_dir() {
  if (const char* env = std::getenv("VOXFIT_DEMO_MRI_DIR")) return env;
  return "/usr/share/doc/insighttoolkit5-examples/examples/Data";
}
inline fs::path voxfit_binary() { return VOXFIT_TEST_BINARY; }

/// A fresh folder under the system temp dir, removed with the fixture.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("voxfit_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
                                        std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
                                        std::to_string(reinterpret_cast<std::uintptr_t>(this)));
    remove_tree(dir_);
    fs::create_directories(dir_);
    torch::manual_seed(0);
  }
  void TearDown() override {
    std::error_code ec;
    if (!HasFailure()) remove_tree(dir_, ec);
  }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

struct RunResult {
  int exit_code = -1;
  std::string out;  ///< stdout
  std::string err;  ///< stderr
};

/// A prepared cache (made once per test process) of an MSD-layout dataset built from the real
/// TotalSegmentator CT crop, its labels reduced to the three largest organs (4 classes with
/// background) in a derived label file. Training, sweep and prediction tests share it.
fs::path prepared_ct_cache();
/// The dataset.json of that dataset (its image is the real CT, read in place).
fs::path ct_dataset_manifest();

/// Runs `voxfit ARGS` through the shell (ARGS already quoted as needed) and captures its output.
RunResult run_voxfit(const std::string& args);
/// Runs a shell command line and captures its output.
RunResult run_command(const std::string& command);

/// A shell prefix running a Python that imports `modules` ("torch, dynamic_network_architectures"):
/// $VOXFIT_PYTHON or python3, with the staged peers (.shared-data/peers) and ../shared/peers on its
/// PYTHONPATH; nullopt where none does (the Python cross-checks are then skipped).
std::optional<std::string> python_with(const std::string& modules);

/// The error column (percent) of the row named `component` in `voxfit models --memory --measure`'s
/// table; fails the test if there is no such row.
double row_error_percent(const std::string& out, const std::string& component);

}  // namespace voxfit::test
