// kill -9 of `voxfit train` (at random times and inside a checkpoint write) and of `voxfit sweep`:
// the next run (--resume, or the same sweep command) continues from the last complete checkpoint
// or journal entry, and every file left behind is whole.
#include <gtest/gtest.h>
#include <sys/inotify.h>

#include <poll.h>
#include <nlohmann/json.hpp>
#include <random>

#include "reliability/reliability_util.h"
#include "voxfit/core/folder_lock.h"
#include "voxfit/train/checkpoint.h"

namespace voxfit {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

/// Every line of a JSON-lines file parses; returns them.
std::vector<nlohmann::json> json_lines(const fs::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  std::string line;
  std::size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const std::exception& e) {
      ADD_FAILURE() << p << " line " << n << " does not parse: '" << line << "'";
    }
  }
  return out;
}

/// The step of the checkpoint, or -1 if there is none; a checkpoint that exists must load.
std::int64_t checkpoint_step(const fs::path& ckpt) {
  if (!fs::exists(ckpt)) return -1;
  try {
    return train::read_checkpoint_meta(ckpt).step;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "the checkpoint left behind does not load: " << e.what();
    return -2;
  }
}

bool wait_until(const std::function<bool()>& done, double seconds) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

/// The run's log lines parse and its step records are 1, 2, ... without gaps (repeats allowed: a
/// resumed run redoes the steps after its checkpoint).
void expect_whole_log(const fs::path& run, std::int64_t last_step) {
  std::int64_t max_step = 0;
  for (const auto& j : json_lines(run / "log.jsonl")) {
    if (j.contains("val_mean_dice")) continue;
    const auto s = j.at("step").get<std::int64_t>();
    EXPECT_LE(s, max_step + 1) << "log.jsonl skips from step " << max_step << " to " << s;
    max_step = std::max(max_step, s);
  }
  EXPECT_EQ(max_step, last_step);
}

class Interrupt : public test::TempDirTest {};

TEST_F(Interrupt, KillNineDuringTrainingResumesFromTheLastCheckpoint) {
  const fs::path run = dir() / "run";
  constexpr int kSteps = 30;
  auto args = test::tiny_train_args(run, kSteps);
  for (const char* a : {"--checkpoint-every", "2", "--log-every", "1"}) args.push_back(a);
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed());
  std::int64_t last = -1;
  int kills = 0;
  for (int round = 0; round < 4; ++round) {
    auto a = args;
    if (round > 0) a.push_back("--resume");
    const test::Child c = test::spawn_voxfit(a, dir() / "log");
    // Kill once a checkpoint newer than the last one exists, after a random part of a step or two.
    const bool newer =
        wait_until([&] { return fs::exists(run / "last.pt") && checkpoint_step(run / "last.pt") > last; }, 120);
    if (newer) std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 400)(rng)));
    ::kill(c.pid, SIGKILL);
    const auto r = test::wait_child(c);
    ASSERT_TRUE(newer) << r.out << r.err;
    if (r.exit_code == 0) {  // it finished before the signal: the resume below starts at its end
      last = checkpoint_step(run / "last.pt");
      break;
    }
    ASSERT_EQ(r.exit_code, 128 + SIGKILL) << r.err;
    ++kills;
    const std::int64_t step = checkpoint_step(run / "last.pt");
    EXPECT_GE(step, std::max<std::int64_t>(last, 2));
    EXPECT_EQ(step % 2, 0);
    last = step;
    json_lines(run / "log.jsonl");
    // Killed after its final checkpoint but before it exited: no newer checkpoint can come.
    if (last >= kSteps) break;
  }
  EXPECT_GE(kills, 1);
  args.push_back("--resume");
  const auto r = test::run_child(args, dir() / "log");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  if (last < kSteps) {
    EXPECT_NE(r.out.find("resuming " + (run / "last.pt").string() + " at step " + std::to_string(last)),
              std::string::npos)
        << r.out;
  }
  EXPECT_EQ(checkpoint_step(run / "last.pt"), kSteps);
  EXPECT_GE(checkpoint_step(run / "best.pt"), 1);
  expect_whole_log(run, kSteps);
  EXPECT_EQ(test::partial_files(run), std::vector<std::string>{});
}

TEST_F(Interrupt, KillNineInsideACheckpointWriteKeepsThePreviousCheckpoint) {
  // A larger network makes the checkpoint a few MiB, so its write takes long enough to be hit.
  const fs::path run = dir() / "run";
  constexpr int kSteps = 8;
  auto args = test::tiny_train_args(run, kSteps, "16", "64");
  for (const char* a : {"--checkpoint-every", "1", "--log-every", "1"}) args.push_back(a);
  int hits = 0;
  std::int64_t last = -1;
  for (int attempt = 0; attempt < 6 && hits < 2; ++attempt) {
    fs::create_directories(run);
    const int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_GE(::inotify_add_watch(fd, run.c_str(), IN_CREATE), 0);
    auto a = args;
    if (last >= 0) a.push_back("--resume");
    const test::Child c = test::spawn_voxfit(a, dir() / "log");
    // The kill goes out the moment the second checkpoint's temp file appears (the first write of a
    // fresh run has no previous checkpoint to fall back to).
    int seen = 0;
    bool killed = false;
    const auto end = Clock::now() + std::chrono::seconds(120);
    alignas(inotify_event) char buf[4096];
    while (!killed && Clock::now() < end && ::waitpid(c.pid, nullptr, WNOHANG) == 0) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::read(fd, buf, sizeof buf);
      for (ssize_t off = 0; n > 0 && off < n && !killed;) {
        const auto* e = reinterpret_cast<const inotify_event*>(buf + off);
        if (e->len > 0 && std::string(e->name).rfind(".last.pt.tmp", 0) == 0 && ++seen == (last >= 0 ? 1 : 2)) {
          ::kill(c.pid, SIGKILL);
          killed = true;
        }
        off += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
      }
    }
    ::close(fd);
    if (!killed) ::kill(c.pid, SIGKILL);
    const auto r = test::wait_child(c);
    ASSERT_TRUE(killed) << "no checkpoint write seen\n" << r.out << r.err;
    if (r.exit_code == 0) break;
    bool temp_left = false;
    for (const auto& e : fs::directory_iterator(run))
      temp_left |= e.path().filename().string().rfind(".last.pt.tmp", 0) == 0;
    const std::int64_t step = checkpoint_step(run / "last.pt");
    ASSERT_GE(step, 1) << "no complete checkpoint survived the kill";
    EXPECT_GE(step, last);
    hits += temp_left;  // the kill landed between the temp file's creation and its rename
    last = step;
  }
  EXPECT_GE(hits, 1) << "no kill landed inside a checkpoint write";
  args.push_back("--resume");
  const auto r = test::run_child(args, dir() / "log");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(checkpoint_step(run / "last.pt"), kSteps);
  expect_whole_log(run, kSteps);
  EXPECT_EQ(test::partial_files(run), std::vector<std::string>{}) << "stale temp files of killed writers remain";
}

TEST_F(Interrupt, KillNineMidSweepResumesFromTheJournal) {
  const fs::path out = dir() / "sweep";
  const auto args = test::tiny_sweep_args(out, "40MiB,48MiB,56MiB");
  const fs::path journal = out / "results.jsonl";
  const test::Child c = test::spawn_voxfit(args, dir() / "log");
  const bool one =
      wait_until([&] { return fs::exists(journal) && test::count_lines(test::read_file(journal)) >= 1; }, 150);
  ::kill(c.pid, SIGKILL);
  auto r = test::wait_child(c);
  ASSERT_TRUE(one) << r.out << r.err;
  const auto before = json_lines(journal);
  ASSERT_GE(before.size(), 1u);
  if (r.exit_code == 0) GTEST_FAIL() << "the sweep finished before the kill; make it longer";
  const std::string first_line = test::read_file(journal).substr(0, test::read_file(journal).find('\n'));

  r = test::run_child(args, dir() / "log");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto after = json_lines(journal);
  EXPECT_EQ(after.size(), 3u);
  EXPECT_EQ(test::read_file(journal).substr(0, first_line.size()), first_line) << "a finished point was redone";
  std::set<std::string> keys;
  for (const auto& e : after) keys.insert(e.value("key", ""));
  EXPECT_EQ(keys.size(), after.size()) << "a point is in the journal twice";
  for (const char* f : {"results.csv", "summary.md"}) EXPECT_TRUE(fs::exists(out / f)) << f;
  EXPECT_EQ(test::partial_files(out), std::vector<std::string>{});
}

TEST_F(Interrupt, ASecondSweepIntoABusyFolderIsRefusedAndTheFirstFinishesWhole) {
  const fs::path out = dir() / "sweep";
  const auto args = test::tiny_sweep_args(out, "40MiB,48MiB");
  const test::Child first = test::spawn_voxfit(args, dir() / "first");
  // The lock file names the first sweep once it holds the folder; it holds it until it exits.
  const std::string holder = "pid " + std::to_string(first.pid) + ":";
  const fs::path lock_file = out / FolderLock::kFileName;
  const bool held = wait_until([&] { return test::read_file(lock_file).rfind(holder, 0) == 0; }, 150);
  test::RunResult second;
  if (held) second = test::run_child(args, dir() / "second");
  const test::RunResult r = test::wait_child(first);
  ASSERT_TRUE(held) << "the first sweep never locked its folder\n" << r.out << r.err;
  EXPECT_TRUE(test::clean_failure(second, {out.string(), holder, "another voxfit process"}, 1));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto entries = json_lines(out / "results.jsonl");
  EXPECT_EQ(entries.size(), 2u);
  std::set<std::string> keys;
  for (const auto& e : entries) keys.insert(e.value("key", ""));
  EXPECT_EQ(keys.size(), entries.size()) << "a point is in the journal twice";
  EXPECT_EQ(test::partial_files(out), std::vector<std::string>{});
}

TEST_F(Interrupt, TrainingIntoAFolderAnotherProcessHoldsIsRefused) {
  const fs::path run = dir() / "run";
  const FolderLock mine(run);  // this test process is the other writer
  const auto r = test::run_child(test::tiny_train_args(run, 2), dir() / "log");
  EXPECT_TRUE(test::clean_failure(r, {run.string(), "pid " + std::to_string(::getpid())}, 1));
  EXPECT_FALSE(fs::exists(run / "config.json")) << "the refused run wrote into the folder";
}

}  // namespace
}  // namespace voxfit
