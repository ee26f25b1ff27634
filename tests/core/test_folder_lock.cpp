// One writer per output folder (core/folder_lock.h): a second lock on a held folder is refused with
// one line naming the folder and the holder; released, the folder can be locked again at once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "support/test_support.h"
#include "voxfit/core/error.h"
#include "voxfit/core/folder_lock.h"

namespace voxfit {
namespace {

namespace fs = std::filesystem;

class FolderLockTest : public test::TempDirTest {};

TEST_F(FolderLockTest, ASecondLockOnAHeldFolderIsRefusedNamingTheFolderAndTheHolder) {
  const fs::path out = dir() / "run" / "nested";
  auto first = std::make_unique<FolderLock>(out);  // creates the folder
  EXPECT_TRUE(fs::is_directory(out));
  try {
    FolderLock second(out);
    FAIL() << "a held folder was locked twice";
  } catch (const IoError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(out.string()), std::string::npos) << what;
    EXPECT_NE(what.find("another voxfit process"), std::string::npos) << what;
    EXPECT_NE(what.find("pid " + std::to_string(::getpid())), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
  }
  first.reset();
  EXPECT_NO_THROW(FolderLock again(out));
}

TEST_F(FolderLockTest, AFolderThatCannotHoldTheLockFileIsAnIoErrorNamingIt) {
  const fs::path file = dir() / "not-a-folder";
  std::ofstream(file) << "x";
  try {
    FolderLock lock(file);
    FAIL() << "a file was locked as a folder";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace voxfit
