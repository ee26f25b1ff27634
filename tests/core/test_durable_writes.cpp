// The order of the system calls behind every durable write: the data is synced before the
// rename, and the folder after it (without the folder's fsync a power loss can undo the rename).
// Recorded by swapping the calls in file_syscalls() for wrappers that log and forward.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <fstream>
#include <string>
#include <vector>

#include "support/test_support.h"
#include "voxfit/core/atomic_file.h"
#include "voxfit/core/error.h"

namespace voxfit {
namespace {

namespace fs = std::filesystem;

std::vector<std::string>* g_durable_calls = nullptr;

std::string durable_fd_path(int fd) {
  char buf[PATH_MAX];
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  return n > 0 ? fs::path(std::string(buf, static_cast<std::size_t>(n))).lexically_normal().string() : "?";
}

class DurableWrites : public test::TempDirTest {
 protected:
  void SetUp() override {
    test::TempDirTest::SetUp();
    saved_ = file_syscalls();
    real_ = saved_;
    g_durable_calls = &calls_;
    file_syscalls().fsync = [](int fd) {
      g_durable_calls->push_back("fsync " + durable_fd_path(fd));
      return real_.fsync(fd);
    };
    file_syscalls().rename = [](const char* from, const char* to) {
      g_durable_calls->push_back("rename " + fs::path(from).filename().string() + " -> " + fs::path(to).string());
      return real_.rename(from, to);
    };
  }
  void TearDown() override {
    file_syscalls() = saved_;
    g_durable_calls = nullptr;
    test::TempDirTest::TearDown();
  }
  // The real folder as /proc/self/fd names it (the temp folder may sit behind a link).
  std::string real_dir() const { return fs::canonical(dir()).string(); }
  std::vector<std::string> calls_;
  FileSyscalls saved_{};
  static FileSyscalls real_;
};
FileSyscalls DurableWrites::real_{};

bool durable_synced(const std::string& call, const std::string& path) { return call == "fsync " + path; }

TEST_F(DurableWrites, AtomicWriteSyncsTheFileThenRenamesThenSyncsTheFolder) {
  const fs::path target = dir() / "results.jsonl";
  write_file_atomic(target, "{}\n");
  ASSERT_EQ(calls_.size(), 3u) << ::testing::PrintToString(calls_);
  EXPECT_EQ(calls_[0].rfind("fsync " + real_dir() + "/.results.jsonl.tmp", 0), 0u) << calls_[0];
  EXPECT_EQ(calls_[1].rfind("rename .results.jsonl.tmp", 0), 0u) << calls_[1];
  EXPECT_NE(calls_[1].find("-> " + target.string()), std::string::npos) << calls_[1];
  EXPECT_TRUE(durable_synced(calls_[2], real_dir())) << calls_[2];
}

TEST_F(DurableWrites, AtomicPathCommitDoesTheSameForWritersThatNeedAFileName) {
  const fs::path target = dir() / "sub" / "last.pt";
  {
    AtomicPath out(target);
    std::ofstream(out.temp()) << "state";
    out.commit();
  }
  ASSERT_EQ(calls_.size(), 3u) << ::testing::PrintToString(calls_);
  EXPECT_EQ(calls_[1].rfind("rename .last.pt.tmp", 0), 0u) << calls_[1];
  EXPECT_TRUE(durable_synced(calls_[2], real_dir() + "/sub")) << calls_[2];
}

TEST_F(DurableWrites, RenameDurableSyncsTheFileAndTheTargetFolder) {
  fs::create_directories(dir() / "plots");
  std::ofstream(dir() / "plots" / "memory.png.tmp") << "png";
  rename_durable(dir() / "plots" / "memory.png.tmp", dir() / "plots" / "memory.png");
  ASSERT_EQ(calls_.size(), 3u) << ::testing::PrintToString(calls_);
  EXPECT_TRUE(durable_synced(calls_[0], real_dir() + "/plots/memory.png.tmp")) << calls_[0];
  EXPECT_EQ(calls_[1], "rename memory.png.tmp -> " + (dir() / "plots" / "memory.png").string());
  EXPECT_TRUE(durable_synced(calls_[2], real_dir() + "/plots")) << calls_[2];
  EXPECT_TRUE(fs::exists(dir() / "plots" / "memory.png"));
}

TEST_F(DurableWrites, AppendSyncsTheFolderOnlyWhenItCreatesTheJournal) {
  const fs::path journal = dir() / "probes.jsonl";
  append_line_durable(journal, "{\"a\":1}");
  ASSERT_EQ(calls_.size(), 2u) << ::testing::PrintToString(calls_);
  EXPECT_TRUE(durable_synced(calls_[0], real_dir() + "/probes.jsonl")) << calls_[0];
  EXPECT_TRUE(durable_synced(calls_[1], real_dir())) << calls_[1];
  calls_.clear();
  append_line_durable(journal, "{\"a\":2}");
  ASSERT_EQ(calls_.size(), 1u) << ::testing::PrintToString(calls_);
  EXPECT_TRUE(durable_synced(calls_[0], real_dir() + "/probes.jsonl")) << calls_[0];
}

TEST_F(DurableWrites, AFailedFolderSyncIsAnErrorNamingTheFile) {
  file_syscalls().fsync = [](int fd) -> int {
    struct stat st;
    if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
      errno = EIO;
      return -1;
    }
    return real_.fsync(fd);
  };
  try {
    write_file_atomic(dir() / "results.json", "{}");
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("results.json: cannot sync its folder"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace voxfit
