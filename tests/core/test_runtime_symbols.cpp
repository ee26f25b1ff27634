#include <dlfcn.h>
#include <gtest/gtest.h>

#include <exception>
#include <filesystem>
#include <string>
#include <system_error>

namespace voxfit {
namespace {

namespace fs = std::filesystem;

// The shared object that serves `function` in this process.
std::string defining_object(void* function) {
  Dl_info info{};
  if (dladdr(function, &info) == 0 || info.dli_fname == nullptr) return "?";
  return info.dli_fname;
}

// PyTorch's pip wheels export statically linked copies of libstdc++'s std::filesystem from
// libtorch (pytorch/pytorch#133437); where the dynamic linker binds voxfit's calls to those
// copies, they crash (a call through a null pointer on the GPU machine, LibTorch 2.11). CMake puts
// libstdc++ first among every executable's libraries so that the C++ runtime's own functions are
// found first; this checks that it worked, for the std::filesystem functions voxfit calls.
TEST(RuntimeSymbols, StdFilesystemComesFromTheCxxRuntimeNotFromLibTorch) {
  const std::string runtime = defining_object(reinterpret_cast<void*>(&std::terminate));
  ASSERT_NE(runtime, "?");
  using Bool = bool (*)(const fs::path&, std::error_code&);
  using Status = fs::file_status (*)(const fs::path&, std::error_code&);
  using Rename = void (*)(const fs::path&, const fs::path&, std::error_code&);
  using Size = std::uintmax_t (*)(const fs::path&, std::error_code&);
  const std::pair<const char*, void*> functions[] = {
      {"create_directories", reinterpret_cast<void*>(static_cast<Bool>(&fs::create_directories))},
      {"remove", reinterpret_cast<void*>(static_cast<Bool>(&fs::remove))},
      {"status", reinterpret_cast<void*>(static_cast<Status>(&fs::status))},
      {"rename", reinterpret_cast<void*>(static_cast<Rename>(&fs::rename))},
      {"file_size", reinterpret_cast<void*>(static_cast<Size>(&fs::file_size))},
  };
  for (const auto& [name, function] : functions)
    EXPECT_EQ(defining_object(function), runtime) << "std::filesystem::" << name;
}

}  // namespace
}  // namespace voxfit
