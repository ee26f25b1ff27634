#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "support/test_support.h"
#include "voxfit/core/atomic_file.h"
#include "voxfit/core/error.h"

namespace voxfit {
namespace {

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class AtomicFile : public test::TempDirTest {};

TEST_F(AtomicFile, ReplacesContentAndLeavesNoTempFiles) {
  const auto path = dir() / "sub" / "result.json";
  write_file_atomic(path, "first");
  write_file_atomic(path, "second");
  EXPECT_EQ(read(path), "second");
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(path.parent_path())) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

TEST_F(AtomicFile, UncommittedWriterLeavesTheOldFileIntact) {
  const auto path = dir() / "ckpt.pt";
  write_file_atomic(path, "old");
  std::filesystem::path temp;
  {
    AtomicPath out(path);
    temp = out.temp();
    std::ofstream(out.temp()) << "half-writ";
  }  // dies without commit, like a failed save
  EXPECT_EQ(read(path), "old");
  EXPECT_FALSE(std::filesystem::exists(temp));
}

TEST_F(AtomicFile, UnwritableFolderIsAnIoErrorNamingThePath) {
  const auto blocker = dir() / "file";
  write_file_atomic(blocker, "x");
  try {
    write_file_atomic(blocker / "child.json", "y");
    FAIL() << "wrote below a regular file";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("file"), std::string::npos);
  }
}

TEST_F(AtomicFile, AppendedLinesAccumulate) {
  const auto path = dir() / "journal.jsonl";
  append_line_durable(path, "{\"a\":1}");
  append_line_durable(path, "{\"a\":2}");
  EXPECT_EQ(read(path), "{\"a\":1}\n{\"a\":2}\n");
}

}  // namespace
}  // namespace voxfit
