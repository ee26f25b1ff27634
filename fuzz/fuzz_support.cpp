#include "fuzz_support.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "voxfit/core/atomic_file.h"

namespace voxfit::fuzz {

namespace fs = std::filesystem;

const fs::path& scratch_dir() {
  static const fs::path dir = [] {
    const fs::path d = fs::temp_directory_path() / ("voxfit_fuzz_" + std::to_string(::getpid()));
    fs::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      remove_tree(fs::temp_directory_path() / ("voxfit_fuzz_" + std::to_string(::getpid())), ec);
    });
    return d;
  }();
  return dir;
}

fs::path write_input(const std::string& name, const std::uint8_t* data, std::size_t size) {
  const fs::path p = scratch_dir() / name;
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return p;
}

}  // namespace voxfit::fuzz
