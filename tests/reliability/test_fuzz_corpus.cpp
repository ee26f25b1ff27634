// Replays the inputs the fuzzers found (tests/reliability/corpus/TARGET/*) through the same code
// the fuzz targets run (fuzz/fuzz_targets.h): each once crashed voxfit or let something other than
// voxfit::Error escape, and must now be refused cleanly.
#include <gtest/gtest.h>

#include "fuzz_targets.h"
#include "reliability/reliability_util.h"

namespace voxfit {
namespace {

namespace fs = std::filesystem;

class FuzzCorpus : public test::TempDirTest {
 protected:
  /// Copies each corpus file of `target` into the temp folder under `name` and runs `read` on it.
  int replay(const std::string& target, const std::function<std::string(const std::string&)>& name,
             const std::function<void(const fs::path&)>& read) {
    int n = 0;
    for (const auto& e : fs::directory_iterator(test::source_dir() / "tests" / "reliability" / "corpus" / target)) {
      if (e.path().filename() == "README.md") continue;
      const std::string bytes = test::read_file(e.path());
      const fs::path file = dir() / name(bytes);
      test::write_text(file, bytes);
      EXPECT_NO_THROW(read(file)) << e.path();
      fs::remove(file);
      ++n;
    }
    return n;
  }
};

bool gzip_magic(const std::string& b) { return b.size() >= 2 && b[0] == '\x1f' && b[1] == '\x8b'; }

TEST_F(FuzzCorpus, ManifestInputsAreRefusedCleanly) {
  replay(
      "manifest", [](const std::string&) { return "dataset.json"; }, fuzz::read_manifest);
}

TEST_F(FuzzCorpus, NiftiInputsAreRefusedCleanly) {
  replay(
      "nifti", [](const std::string& b) { return gzip_magic(b) ? "input.nii.gz" : "input.nii"; }, fuzz::read_nifti);
}

TEST_F(FuzzCorpus, Hdf5InputsAreRefusedCleanly) {
  replay(
      "h5", [](const std::string&) { return "case.h5"; }, fuzz::read_h5);
}

TEST_F(FuzzCorpus, IniInputsAreRefusedCleanly) {
  replay(
      "ini", [](const std::string&) { return "run.ini"; }, fuzz::read_ini);
}

TEST_F(FuzzCorpus, TorchScriptInputsAreRefusedCleanly) {
  replay(
      "torchscript", [](const std::string&) { return "model.ts"; }, fuzz::read_torchscript);
}

}  // namespace
}  // namespace voxfit
