// Untrusted HDF5 cannot take voxfit down: a corpus of corrupted case files (written by
// tests/support/make_bad_h5.cpp on HDF5's C API) gives one line each from `data check` and
// `data prepare`, exit 1, never a signal, and leaves no cache behind, whatever the HDF5 library
// does with them (voxfit reads a user's HDF5 file in a child process first: io::survive_h5_read).
#include <gtest/gtest.h>

#include <algorithm>

#include "reliability/reliability_util.h"

namespace voxfit {
namespace {

using test::run_voxfit;

class CorruptHdf5 : public test::TempDirTest {};

TEST_F(CorruptHdf5, EachFileOfTheCorpusGivesOneLineFromCheckAndPrepareAndNoSignal) {
  const fs::path corpus = dir() / "corpus";
  fs::create_directories(corpus);
  ASSERT_EQ(std::system(("'" + std::string(VOXFIT_TEST_MAKE_BAD_H5) + "' '" + corpus.string() + "'").c_str()), 0);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(corpus)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_EQ(files.size(), 7u);
  for (const auto& f : files) {
    SCOPED_TRACE(f.filename().string());
    const fs::path root = dir() / f.stem();
    fs::create_directories(root);
    const fs::path file = root / "case0.h5";
    fs::copy_file(f, file);
    auto r = run_voxfit("data check '" + root.string() + "'");
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.out.find(file.string()), std::string::npos) << r.out;
    EXPECT_EQ(r.err.find("Sanitizer"), std::string::npos) << r.err;
    // One problem line per broken dataset, each naming the file (a file that cannot be opened is
    // one line, not one for its image and one for its label); nothing of HDF5's own error stack.
    std::istringstream lines(r.out);
    int problem_lines = 0;
    for (std::string line; std::getline(lines, line);) {
      EXPECT_EQ(line.find("HDF5-DIAG"), std::string::npos) << line;
      problem_lines += line.rfind(file.string() + ": ", 0) == 0;
    }
    EXPECT_EQ(problem_lines, f.stem() == "link_loop" ? 2 : 1) << r.out;
    const fs::path cache = dir() / (f.stem().string() + "_cache");
    r = run_voxfit("data prepare '" + root.string() + "' -q -o '" + cache.string() + "'");
    EXPECT_TRUE(test::clean_failure(r, {file.string()}, 1));
    EXPECT_EQ(test::files_under(cache), std::vector<std::string>{});
  }
}

}  // namespace
}  // namespace voxfit
