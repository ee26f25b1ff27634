// A full disk while writing the cache, a checkpoint and sweep results. The child runs with a file
// size limit (RLIMIT_FSIZE, SIGXFSZ ignored): a write past it fails with EFBIG exactly where a full
// disk fails with ENOSPC, and it needs neither root nor a tmpfs, so CI runs it too. Each must
// end with one line naming the file, and what earlier runs wrote must be intact.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "reliability/reliability_util.h"
#include "voxfit/data/plan.h"
#include "voxfit/train/checkpoint.h"

namespace voxfit {
namespace {

namespace fs = std::filesystem;
using test::clean_failure;

class DiskFull : public test::TempDirTest {
 protected:
  /// Every regular file under `d`: its path, size and a hash of its bytes.
  static std::map<std::string, std::pair<std::size_t, std::size_t>> snapshot(const fs::path& d) {
    std::map<std::string, std::pair<std::size_t, std::size_t>> out;
    for (const auto& f : test::files_under(d)) {
      const std::string bytes = test::read_file(f);
      out[f] = {bytes.size(), std::hash<std::string>{}(bytes)};
    }
    return out;
  }
};

TEST_F(DiskFull, PreparingTheCacheFailsCleanlyAndKeepsTheEarlierCache) {
  const fs::path root = test::small_msd_dataset(dir() / "ds");
  const fs::path cache = dir() / "cache";
  ASSERT_EQ(test::run_child({"data", "prepare", "-q", root.string(), "-o", cache.string()}, dir() / "log").exit_code,
            0);
  const auto before = snapshot(cache);
  ASSERT_EQ(before.size(), 3u);  // plan.json, fingerprint.json and one case file

  // A bigger case, listed first: its HDF5 file is the first write and no longer fits. (A failure
  // after other cases were rewritten would leave them newer than plan.json: prepare is atomic per
  // file, not per cache.)
  io::write_volume(root / "imagesTr" / "b0.nii.gz", test::small_ct(PixelType::Int16, {48, 40, 32}));
  io::write_volume(root / "labelsTr" / "b0.nii.gz", test::small_label({48, 40, 32}));
  test::write_msd_manifest(
      root, {{"./imagesTr/b0.nii.gz", "./labelsTr/b0.nii.gz"}, {"./imagesTr/c0.nii.gz", "./labelsTr/c0.nii.gz"}},
      {{"0", "background"}, {"1", "a"}, {"2", "b"}});
  test::SpawnOptions limit;
  limit.max_file_bytes = 64 << 10;
  const auto r = test::run_child({"data", "prepare", "-q", root.string(), "-o", cache.string()}, dir() / "log", limit);
  EXPECT_TRUE(clean_failure(r, {(cache / "cases").string()}, 1));
  EXPECT_EQ(snapshot(cache), before) << "the earlier cache changed";
  EXPECT_EQ(test::partial_files(cache), std::vector<std::string>{});
  EXPECT_EQ(data::load_plan(cache).cases.size(), 1u);
}

TEST_F(DiskFull, WritingACheckpointFailsCleanlyAndKeepsThePreviousOne) {
  const fs::path run = dir() / "run";
  auto args = test::tiny_train_args(run, 4, "16", "64");
  args.insert(args.end(), {"--checkpoint-every", "2"});
  auto first = args;
  first.insert(first.end(), {"--stop-after", "2"});
  ASSERT_EQ(test::run_child(first, dir() / "log").exit_code, 0);
  const std::string good = test::read_file(run / "last.pt");
  ASSERT_GT(good.size(), 256u << 10);

  args.push_back("--resume");
  test::SpawnOptions limit;
  limit.max_file_bytes = 256 << 10;  // the logs fit, a checkpoint does not
  const auto r = test::run_child(args, dir() / "log", limit);
  // The last step validates, so best.pt is the first checkpoint that no longer fits.
  EXPECT_TRUE(clean_failure(r, {run.string(), ".pt: cannot write checkpoint (File too large)"}, 1));
  EXPECT_TRUE(test::read_file(run / "last.pt") == good) << "the previous checkpoint changed";
  EXPECT_EQ(train::read_checkpoint_meta(run / "last.pt").step, 2);
  EXPECT_EQ(test::partial_files(run), std::vector<std::string>{});
  // With room again the run resumes from that checkpoint and finishes.
  const auto again = test::run_child(args, dir() / "log");
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(train::read_checkpoint_meta(run / "last.pt").step, 4);
}

TEST_F(DiskFull, AppendingSweepResultsFailsCleanlyAndKeepsEarlierEntries) {
  const fs::path out = dir() / "sweep";
  ASSERT_EQ(test::run_child(test::tiny_sweep_args(out, "40MiB"), dir() / "log").exit_code, 0);
  const fs::path journal = out / "results.jsonl";
  const std::string entries = test::read_file(journal);
  ASSERT_EQ(test::count_lines(entries), 1u);

  // One more budget: its journal entries would take the files past the limit. Since each probe
  // carries its memory breakdown, the point's probe journal (probes.jsonl) reaches the limit
  // before its results.jsonl line does: either journal is the one named.
  const auto args = test::tiny_sweep_args(out, "40MiB,48MiB");
  test::SpawnOptions limit;
  limit.max_file_bytes = entries.size() + 16;
  const auto r = test::run_child(args, dir() / "log", limit);
  EXPECT_TRUE(clean_failure(r, {out.string(), ".jsonl: write failed: File too large"}, 1));
  EXPECT_EQ(test::read_file(journal), entries) << "the journal changed (an earlier entry, or half a new one)";
  EXPECT_EQ(test::partial_files(out), std::vector<std::string>{});
  const auto again = test::run_child(args, dir() / "log");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(test::count_lines(test::read_file(journal)), 2u);
}

}  // namespace
}  // namespace voxfit
