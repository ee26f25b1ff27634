#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

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

// A writer killed before its rename leaves ".NAME.tmpPID_N": a resumed run removes those of dead
// processes, whatever NAME, and nothing else (a live writer's temp, a user's "notes.tmp").
TEST_F(AtomicFile, StaleTemporariesOfDeadWritersAreRemovedAndNothingElse) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);  // its PID now names no process
  const auto dead = dir() / (".memory-breakdown.png.tmp" + std::to_string(child) + "_0");
  const auto alive = dir() / (".last.pt.tmp" + std::to_string(::getpid()) + "_3");
  const auto users = dir() / "notes.tmp";
  for (const auto& p : {dead, alive, users}) std::ofstream(p) << "x";
  remove_stale_temporaries(dir());
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(alive));
  EXPECT_TRUE(std::filesystem::exists(users));
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

class RemoveTree : public test::TempDirTest {};

TEST_F(RemoveTree, RemovesNestedFoldersButNotWhatTheirLinksPointTo) {
  namespace fs = std::filesystem;
  const auto tree = dir() / "tree";
  write_file_atomic(tree / "a" / "b" / "file", "1");
  write_file_atomic(tree / "c" / "file2", "2");
  write_file_atomic(dir() / "keep" / "precious", "3");
  fs::create_directory_symlink(dir() / "keep", tree / "folder_link");
  fs::create_symlink(dir() / "keep" / "precious", tree / "c" / "file_link");
  // tree, a, b, file, c, file2, file_link, folder_link
  EXPECT_EQ(remove_tree(tree), 8u);
  EXPECT_FALSE(fs::exists(fs::symlink_status(tree)));
  EXPECT_EQ(read(dir() / "keep" / "precious"), "3");
}

TEST_F(RemoveTree, MissingPathIsNothingToDoAndAFileIsOneEntry) {
  std::error_code ec;
  EXPECT_EQ(remove_tree(dir() / "absent", ec), 0u);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(remove_tree(dir() / "absent"), 0u);
  write_file_atomic(dir() / "single", "x");
  EXPECT_EQ(remove_tree(dir() / "single"), 1u);
  EXPECT_FALSE(std::filesystem::exists(dir() / "single"));
}

TEST_F(RemoveTree, FailureIsReportedWithThePath) {
  write_file_atomic(dir() / "plain", "x");
  const auto below_a_file = dir() / "plain" / "child";  // lstat: not a directory
  std::error_code ec;
  EXPECT_EQ(remove_tree(below_a_file, ec), 0u);
  EXPECT_EQ(ec, std::errc::not_a_directory) << ec.message();
  try {
    remove_tree(below_a_file);
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("plain/child"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace voxfit
