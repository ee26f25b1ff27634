#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace voxfit {
namespace {

namespace fs = std::filesystem;

// PyTorch's pip wheels export a statically linked copy of libstdc++'s std::filesystem from
// libtorch.so (pytorch/pytorch#133437), and on the GPU machine (LibTorch 2.11) the dynamic linker
// binds voxfit's std::filesystem calls to it whatever the link order; its remove_all calls through
// a null pointer. voxfit removes folders with remove_tree (core, POSIX nftw) instead. This keeps a
// call to remove_all from coming back into any source of the project: it would pass every test on
// Debian's LibTorch and crash on a CUDA build.
TEST(SourceTree, NoCodeCallsStdFilesystemRemoveAll) {
  const fs::path root = VOXFIT_TEST_SOURCE_DIR;
  const std::regex call(std::string("remove_all") + R"(\s*\()");
  std::vector<std::string> offenders;
  int scanned = 0;
  for (const char* dir : {"src", "include", "tests", "fuzz", "tools"}) {
    if (!fs::is_directory(root / dir)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root / dir)) {
      const auto ext = entry.path().extension();
      if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".h" && ext != ".cu" && ext != ".c")) continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      ++scanned;
      if (std::regex_search(text.str(), call)) offenders.push_back(fs::relative(entry.path(), root).string());
    }
  }
  EXPECT_GT(scanned, 100) << "the source tree was not found under " << root;
  EXPECT_TRUE(offenders.empty()) << "files calling std::filesystem::remove_all: "
                                 << ::testing::PrintToString(offenders);
}

}  // namespace
}  // namespace voxfit
