#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include <torch/cuda.h>

#include "support/test_support.h"

namespace voxfit {
namespace {

using test::run_voxfit;

// Whether this build links a CUDA LibTorch (its kernels are then compiled in).
bool torch_cuda_build() {
#if defined(VOXFIT_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

std::size_t count_lines(const std::string& s) {
  std::size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

class Cli : public test::TempDirTest {};

TEST_F(Cli, HelpListsEveryCommand) {
  const auto r = run_voxfit("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* c : {"info", "data", "models", "train", "predict", "export", "sweep", "bench", "cards"})
    EXPECT_NE(r.out.find(std::string("  ") + c), std::string::npos) << c;
}

TEST_F(Cli, EveryCommandTakesHelp) {
  for (const char* c : {"info", "data", "models", "train", "predict", "export", "sweep", "bench", "cards"}) {
    const auto r = run_voxfit(std::string(c) + " --help");
    EXPECT_EQ(r.exit_code, 0) << c << ": " << r.err;
    EXPECT_NE(r.out.find("usage: voxfit"), std::string::npos) << c;
    EXPECT_NE(r.out.find("--config"), std::string::npos) << c;
  }
}

// --print-config prints every effective option as an .ini; --config reads it back to the same options.
TEST_F(Cli, PrintConfigRoundTripsThroughConfig) {
  const auto r = run_voxfit("train --print-config --model unetr --batch 4 --lr 0.0003 --no-augment --output run");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* line : {"\nbatch = 4\n", "\nlr = 0.0003\n", "\nno-augment = true\n", "\nmodel = unetr\n",
                           "\nsteps = 250\n", "\nprecision = fp32\n", "\noversample = 0.33\n"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << r.out;
  EXPECT_EQ(r.out.find("\nhelp ="), std::string::npos) << r.out;
  const auto ini = dir() / "train.ini";
  std::ofstream(ini) << r.out;
  const auto back = run_voxfit("train --config " + ini.string() + " --print-config");
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_EQ(back.out, r.out);
  // Every command takes it.
  for (const char* c : {"info", "data prepare", "models", "predict", "export", "sweep", "bench", "cards list"})
    EXPECT_EQ(run_voxfit(std::string(c) + " --print-config").exit_code, 0) << c;
}

TEST_F(Cli, ExportErrorsAreOneLineNamingTheFile) {
  const auto missing = dir() / "nope.pt";
  auto r = run_voxfit("export --checkpoint '" + missing.string() + "' --output '" + (dir() / "w.pt").string() + "'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(missing.string()), std::string::npos) << r.err;
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  r = run_voxfit("export --checkpoint '" + missing.string() + "'");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--output"), std::string::npos) << r.err;
  r = run_voxfit("export --checkpoint '" + missing.string() + "' --output w.pt --names timm");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--names"), std::string::npos) << r.err;
}

TEST_F(Cli, InfoReportsVersionsDevicesAndThreads) {
  const auto r = run_voxfit("info --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* k : {"voxfit", "LibTorch", "ITK", "HDF5", "Boost", "cuDNN", "intra-op 2", "cpu", "  data "})
    EXPECT_NE(r.out.find(k), std::string::npos) << k << "\n" << r.out;
}

// Sets an environment variable (or unsets it, for nullptr) for one scope; voxfit children inherit it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() { old_ ? ::setenv(name_, old_->c_str(), 1) : ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// PyTorch's habit, which cluster users rely on: OMP_NUM_THREADS (else MKL_NUM_THREADS) sets the
// intra-op threads unless --threads says otherwise; without either, one per hardware thread.
TEST_F(Cli, ThreadsFollowOmpNumThreadsUnlessTheOptionIsGiven) {
  const ScopedEnv mkl("MKL_NUM_THREADS", nullptr);
  {
    const ScopedEnv omp("OMP_NUM_THREADS", nullptr);
    const auto r = run_voxfit("info");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string hw = std::to_string(std::thread::hardware_concurrency());
    EXPECT_NE(r.out.find("intra-op " + hw + ","), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("hardware " + hw), std::string::npos) << r.out;
  }
  {
    const ScopedEnv omp("OMP_NUM_THREADS", "3,1");
    auto r = run_voxfit("info");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("intra-op 3,"), std::string::npos) << r.out;
    r = run_voxfit("info --threads 2");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("intra-op 2,"), std::string::npos) << r.out;
  }
  {
    const ScopedEnv omp("OMP_NUM_THREADS", nullptr);
    const ScopedEnv mkl5("MKL_NUM_THREADS", "5");
    const auto r = run_voxfit("info");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("intra-op 5,"), std::string::npos) << r.out;
  }
  for (const char* bad : {"lots", "0", "-2", "100000000", "4x"}) {
    const ScopedEnv omp("OMP_NUM_THREADS", bad);
    const auto r = run_voxfit("info");
    EXPECT_EQ(r.exit_code, 2) << bad;
    // libgomp warns of most of these itself, before main; voxfit's own error is one line after it.
    const auto ours = r.err.find("voxfit: error: OMP_NUM_THREADS=" + std::string(bad) + ": ");
    ASSERT_NE(ours, std::string::npos) << r.err;
    EXPECT_EQ(count_lines(r.err.substr(ours)), 1u) << r.err;
  }
}

// Without a usable GPU, `voxfit info` says why in one line; with CUDA_VISIBLE_DEVICES empty that
// is the reason whatever the machine has. The build's LibTorch decides which reasons can occur.
TEST_F(Cli, InfoSaysInOneLineWhyNoGpuIsUsed) {
  const bool cuda_build = torch_cuda_build();
  {
    const ScopedEnv hide("CUDA_VISIBLE_DEVICES", "");
    const auto r = run_voxfit("info");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto at = r.out.find("  no GPU used: ");
    ASSERT_NE(at, std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("  cuda:0"), std::string::npos) << r.out;
    const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
    EXPECT_NE(line.find(cuda_build ? "CUDA_VISIBLE_DEVICES is empty" : "CPU-only LibTorch"), std::string::npos)
        << line;
    EXPECT_NE(r.out.find(cuda_build ? "(CUDA build)" : "(CPU only)"), std::string::npos) << r.out;
  }
  if (!torch::cuda::is_available()) {
    const ScopedEnv visible("CUDA_VISIBLE_DEVICES", nullptr);
    const auto r = run_voxfit("info");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("  no GPU used: " + std::string(cuda_build ? "" : "this voxfit is built against a CPU-only")),
              std::string::npos)
        << r.out;
    // The same reason where a GPU is asked for.
    const auto t = run_voxfit("bench --model resnet50 --device cuda --steps 1");
    EXPECT_EQ(t.exit_code, 2) << t.err;
    EXPECT_EQ(count_lines(t.err), 1u) << t.err;
    EXPECT_NE(t.err.find("no CUDA device ("), std::string::npos) << t.err;
  }
}

TEST_F(Cli, BadOptionIsOneLineAndExitTwo) {
  const auto r = run_voxfit("info --no-such-option");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("no-such-option"), std::string::npos);
}

// An abbreviation is not guessed: `--bat 4` would silently be `--batch 4`, and a later option
// sharing the prefix would change what an old command line means.
TEST_F(Cli, AnAbbreviatedOptionIsUnknownNotGuessed) {
  const auto r = run_voxfit("models --mod unetr");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("unrecognised option '--mod'"), std::string::npos) << r.err;
  EXPECT_EQ(run_voxfit("models --model unetr").exit_code, 0);
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
