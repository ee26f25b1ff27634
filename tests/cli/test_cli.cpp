#include <gtest/gtest.h>

#include <fstream>

#include "support/test_support.h"

namespace voxfit {
namespace {

using test::run_voxfit;

std::size_t count_lines(const std::string& s) {
  std::size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

class Cli : public test::TempDirTest {};

TEST_F(Cli, HelpListsEveryCommand) {
  const auto r = run_voxfit("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* c : {"info", "data", "models", "train", "predict", "sweep", "bench", "cards"})
    EXPECT_NE(r.out.find(std::string("  ") + c), std::string::npos) << c;
}

TEST_F(Cli, EveryCommandTakesHelp) {
  for (const char* c : {"info", "data", "models", "train", "predict", "sweep", "bench", "cards"}) {
    const auto r = run_voxfit(std::string(c) + " --help");
    EXPECT_EQ(r.exit_code, 0) << c << ": " << r.err;
    EXPECT_NE(r.out.find("usage: voxfit"), std::string::npos) << c;
    EXPECT_NE(r.out.find("--config"), std::string::npos) << c;
  }
}

TEST_F(Cli, InfoReportsVersionsDevicesAndThreads) {
  const auto r = run_voxfit("info --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* k : {"voxfit", "LibTorch", "ITK", "HDF5", "Boost", "cuDNN", "intra-op 2", "cpu"})
    EXPECT_NE(r.out.find(k), std::string::npos) << k << "\n" << r.out;
}

TEST_F(Cli, BadOptionIsOneLineAndExitTwo) {
  const auto r = run_voxfit("info --no-such-option");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("no-such-option"), std::string::npos);
}

TEST_F(Cli, UnknownCommandIsExitTwo) {
  const auto r = run_voxfit("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count_lines(r.err), 1u);
}

TEST_F(Cli, MissingConfigFileIsOneLineNamingItAndExitTwo) {
  const auto r = run_voxfit("info --config " + (dir() / "nope.ini").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("nope.ini"), std::string::npos);
}

TEST_F(Cli, ConfigFileSetsOptionsAndCommandLineWins) {
  const auto ini = dir() / "run.ini";
  std::ofstream(ini) << "threads = 1\n[info]\nthreads = 1\n[train]\nwhatever = 3\n";
  auto r = run_voxfit("info --config " + ini.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("intra-op 1"), std::string::npos) << r.out;
  r = run_voxfit("info --threads 2 --config " + ini.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("intra-op 2"), std::string::npos) << r.out;
}

TEST_F(Cli, ConfigFileWithUnknownKeyOrBadValueNamesFileAndKey) {
  const auto ini = dir() / "bad.ini";
  std::ofstream(ini) << "[info]\nthredas = 2\n";
  auto r = run_voxfit("info --config " + ini.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("bad.ini"), std::string::npos);
  EXPECT_NE(r.err.find("thredas"), std::string::npos);
  std::ofstream(ini) << "threads = lots\n";
  r = run_voxfit("info --config " + ini.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("bad.ini"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace voxfit
