#include "voxfit/core/paths.h"

#include <cstdlib>
#include <system_error>

#ifndef VOXFIT_SOURCE_DATA_DIR
#error "VOXFIT_SOURCE_DATA_DIR (the source tree's data folder) is set by CMakeLists.txt"
#endif

namespace voxfit {

namespace fs = std::filesystem;

fs::path executable_path() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe;
}

fs::path data_dir() {
  if (const char* env = std::getenv("VOXFIT_DATA_DIR"); env != nullptr && *env != '\0') return env;
  const fs::path exe = executable_path();
  if (!exe.empty()) {
    const fs::path installed = exe.parent_path().parent_path() / "share" / "voxfit";
    std::error_code ec;
    if (fs::is_regular_file(installed / "cards.csv", ec)) return installed.lexically_normal();
  }
  return VOXFIT_SOURCE_DATA_DIR;
}

fs::path card_table_path() { return data_dir() / "cards.csv"; }

fs::path reference_table_path() { return data_dir() / "reference" / "autodl_seed.csv"; }

}  // namespace voxfit
