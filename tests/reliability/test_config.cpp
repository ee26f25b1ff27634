// Bad manifests, bad .ini files, impossible option combinations and broken checkpoints, through the
// real `voxfit` binary: one line on stderr naming the file or option, a usage (2) or job (1) exit
// status, no crash, and nothing written.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "reliability/reliability_util.h"

namespace voxfit {
namespace {

namespace fs = std::filesystem;
using test::clean_failure;
using test::run_voxfit;

// ---- dataset.json: malformed JSON and schema violations (exit 2, naming the file and field) ----

struct BadManifest {
  const char* name;
  const char* json;
  const char* field;  ///< the field (or problem) the message must name
};
void PrintTo(const BadManifest& c, std::ostream* os) { *os << c.name; }

class BadManifestTest : public test::TempDirTest, public ::testing::WithParamInterface<BadManifest> {};

TEST_P(BadManifestTest, EveryCommandThatReadsItNamesFileAndField) {
  const fs::path root = dir() / "ds";
  fs::create_directories(root);
  const fs::path manifest = root / "dataset.json";
  test::write_text(manifest, GetParam().json);
  for (const std::string& cmd : {"data check '" + root.string() + "'",
                                 "data prepare '" + manifest.string() + "' -o '" + (dir() / "cache").string() + "'"}) {
    const auto r = run_voxfit(cmd);
    EXPECT_TRUE(clean_failure(r, {manifest.string(), GetParam().field}, 2)) << cmd;
  }
  EXPECT_EQ(test::files_under(dir() / "cache"), std::vector<std::string>{});
}

INSTANTIATE_TEST_SUITE_P(
    Manifests, BadManifestTest,
    ::testing::Values(
        BadManifest{"Empty", "", "not valid JSON"}, BadManifest{"Unterminated", "{ \"training\": [", "not valid JSON"},
        BadManifest{"NotAnObject", "[1, 2, 3]", "expected a JSON object"},
        BadManifest{"Neither", "{\"name\": \"x\"}", "neither an MSD manifest"},
        BadManifest{"NameNotAString", R"({"name": 5, "training": []})", "name"},
        BadManifest{"TrainingNotAList", R"({"training": "x"})", "'training'"},
        BadManifest{"EntryWithoutImage", R"({"training": [{"label": "a.nii.gz"}]})", "training[0]"},
        BadManifest{"ImageNotAPath", R"({"training": [{"image": 5}]})", "'image'"},
        BadManifest{"ImageListOfNumbers", R"({"training": [{"image": [1, 2]}]})", "'image'"},
        BadManifest{"LabelNotAPath", R"({"training": [{"image": "a.nii.gz", "label": ["b"]}]})", "'label'"},
        BadManifest{"LabelKeyNotAnInteger", R"({"labels": {"x": "liver"}, "training": []})", "'labels' key 'x'"},
        BadManifest{"LabelsNotAnObject", R"({"labels": [0, 1], "training": []})", "'labels'"},
        BadManifest{"ModalityIndexNotANumber", R"({"modality": {"a": "CT"}, "training": []})", "'modality'"},
        BadManifest{"ModalityGap", R"({"modality": {"0": "CT", "2": "MR"}, "training": []})", "without gaps"},
        BadManifest{"NnUNetWithoutFileEnding", R"({"channel_names": {"0": "CT"}})", "'file_ending'"},
        BadManifest{"NnUNetWithoutChannels", R"({"file_ending": ".nii.gz"})", "'channel_names'"},
        BadManifest{"NnUNetRegionLabels",
                    R"({"channel_names": {"0": "CT"}, "file_ending": ".nii.gz", "labels": {"a": [1, 2]}})",
                    "label 'a'"},
        BadManifest{"NnUNetFileEndingNotAString", R"({"channel_names": {"0": "CT"}, "file_ending": 3})",
                    "'file_ending'"}),
    [](const ::testing::TestParamInfo<BadManifest>& i) { return std::string(i.param.name); });

// ---- .ini files: unknown keys and bad values, for every command (exit 2, naming file and key) ----

struct BadIni {
  const char* name;
  const char* command;  ///< the command the file is given to
  const char* ini;
  std::vector<std::string> names;  ///< what the message must name besides the file
};
void PrintTo(const BadIni& c, std::ostream* os) { *os << c.name; }

class BadIniTest : public test::TempDirTest, public ::testing::WithParamInterface<BadIni> {};

TEST_P(BadIniTest, RefusedWithOneLineNamingFileAndKey) {
  const fs::path ini = dir() / "bad.ini";
  test::write_text(ini, GetParam().ini);
  const auto r = run_voxfit(std::string(GetParam().command) + " --config '" + ini.string() + "'");
  std::vector<std::string> names = GetParam().names;
  names.push_back(ini.string());
  EXPECT_TRUE(clean_failure(r, names, 2));
}

// Unknown keys, at top level and in the command's section, for every command.
std::vector<BadIni> unknown_keys() {
  static const char* commands[] = {"info",  "data check", "data prepare", "data bench", "data demo", "models",
                                   "train", "predict",    "sweep",        "bench",      "cards"};
  static std::vector<std::string> texts;  // keeps the ini texts alive for the BadIni pointers
  static std::vector<std::string> names;
  std::vector<BadIni> out;
  texts.reserve(64);
  names.reserve(64);
  for (const char* c : commands) {
    std::string section = c;
    for (char& ch : section)
      if (ch == ' ') ch = '.';
    texts.push_back("thredas = 2\n");
    std::string n = c;
    for (char& ch : n)
      if (ch == ' ') ch = '_';
    names.push_back(n + "_TopLevel");
    out.push_back({names.back().c_str(), c, texts.back().c_str(), {"thredas"}});
    texts.push_back("[" + section + "]\nbatch-size = 2\n");
    names.push_back(n + "_InSection");
    out.push_back({names.back().c_str(), c, texts.back().c_str(), {"batch-size"}});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(UnknownKeys, BadIniTest, ::testing::ValuesIn(unknown_keys()),
                         [](const ::testing::TestParamInfo<BadIni>& i) { return std::string(i.param.name); });

INSTANTIATE_TEST_SUITE_P(
    BadValues, BadIniTest,
    ::testing::Values(
        BadIni{"ThreadsNotANumber", "info", "threads = lots\n", {"threads"}},
        BadIni{"ThreadsNegative", "info", "[info]\nthreads = -1\n", {"--threads"}},
        BadIni{"ThreadsAbsurd", "info", "threads = 100000000\n", {"--threads"}},
        BadIni{"SwitchNotABoolean", "data prepare", "[data.prepare]\nforce = maybe\n", {"force", "true or false"}},
        BadIni{"NoEqualsSign", "train", "[train]\nsteps\n", {}},
        BadIni{"StepsNotANumber", "train", "[train]\nsteps = many\n", {"steps"}},
        BadIni{"ConfigInsideConfig", "info", "config = other.ini\n", {"config"}},
        BadIni{"HelpInConfig", "info", "help = true\n", {"help"}},
        BadIni{"SeedNotANumber", "train", "[train]\nseed = abc\n", {"seed"}},
        BadIni{"GzipNotANumber", "data prepare", "[data.prepare]\ngzip = high\n", {"gzip"}}),
    [](const ::testing::TestParamInfo<BadIni>& i) { return std::string(i.param.name); });

TEST_F(BadIniTest, ConfigPathThatIsAFolderOrMissing) {
  for (const fs::path& p : {dir(), dir() / "missing.ini"}) {
    const auto r = run_voxfit("train --config '" + p.string() + "'");
    EXPECT_TRUE(clean_failure(r, {p.string()}, 2));
  }
}

// ---- option values and combinations that cannot work, on a valid cache ----

struct BadRun {
  const char* name;
  std::vector<std::string> args;  ///< appended to a valid tiny training run
  std::vector<std::string> names;
  int exit_code;
};
void PrintTo(const BadRun& c, std::ostream* os) { *os << c.name; }

class BadTrainOptions : public test::TempDirTest, public ::testing::WithParamInterface<BadRun> {};

TEST_P(BadTrainOptions, RefusedBeforeWritingAnything) {
  const fs::path run = dir() / "run";
  auto args = test::tiny_train_args(run, 2);
  // Later options replace earlier ones for single-valued keys only through the ini layer, so the
  // defaults this test overrides are removed first.
  for (const auto& a : GetParam().args) {
    if (a.rfind("--", 0) != 0) continue;
    for (std::size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == a) {
        args.erase(args.begin() + static_cast<std::ptrdiff_t>(i), args.begin() + static_cast<std::ptrdiff_t>(i) + 2);
        break;
      }
  }
  args.insert(args.end(), GetParam().args.begin(), GetParam().args.end());
  const auto r = test::run_child(args, dir() / "log");
  EXPECT_TRUE(clean_failure(r, GetParam().names, GetParam().exit_code));
  EXPECT_FALSE(fs::exists(run / "last.pt"));
  EXPECT_EQ(test::partial_files(run), std::vector<std::string>{});
}

INSTANTIATE_TEST_SUITE_P(
    Combinations, BadTrainOptions,
    ::testing::Values(BadRun{"BudgetBelowStaticMemory", {"--vram", "1MiB"}, {"1.00 MiB"}, 1},
                      BadRun{"PatchLargerThanEveryCase", {"--patch", "64,64,64"}, {"--patch 64x64x64"}, 2},
                      BadRun{"PatchTwoD", {"--patch", "16,16"}, {"patch"}, 2},
                      BadRun{"PatchZero", {"--patch", "0,16,16"}, {"patch"}, 2},
                      BadRun{"BatchZero", {"--batch", "0"}, {"--batch"}, 2},
                      BadRun{"BatchNotANumber", {"--batch", "lots"}, {"--batch"}, 2},
                      BadRun{"StepsZero", {"--steps", "0"}, {"--steps"}, 2},
                      BadRun{"LearningRateNaN", {"--lr", "nan"}, {"--lr"}, 2},
                      BadRun{"OversampleAboveOne", {"--oversample", "2"}, {"--oversample"}, 2},
                      BadRun{"FlipProbabilityAboveOne", {"--flip-probability", "1.5"}, {"--flip-probability"}, 2},
                      BadRun{"AugmentUnknownGroup", {"--augment", "mirror,elastic"}, {"'elastic'"}, 2},
                      BadRun{"FlipProbabilityWithoutMirror", {"--augment", "spatial", "--flip-probability", "0.5"},
                             {"--flip-probability", "no mirror"}, 2},
                      // The tiny run already has --no-augment.
                      BadRun{"NoAugmentAgainstAugment", {"--augment", "mirror"}, {"disagree"}, 2},
                      BadRun{"ValidationFractionOne", {"--validation-fraction", "1"}, {"validation fraction"}, 2},
                      BadRun{"NoLoaderThreads", {"--loader-threads", "0"}, {"--loader-threads"}, 2},
                      BadRun{"UnknownModel", {"--model", "unet4d"}, {"unet4d"}, 2},
                      BadRun{"UnknownPrecision", {"--precision", "fp8"}, {"fp8"}, 2},
                      BadRun{"Fp16OnCpu", {"--precision", "fp16"}, {"fp16"}, 2},
                      BadRun{"CudaInACpuRun", {"--device", "cuda:3"}, {"cuda:3"}, 2},
                      BadRun{"VramNotASize", {"--vram", "12parsecs"}, {"12parsecs"}, 2},
                      BadRun{"UnknownCard", {"--card", "voodoo2"}, {"voodoo2"}, 2},
                      BadRun{"ResumeWithoutCheckpoint", {"--resume"}, {"last.pt"}, 1},
                      BadRun{"DatasetMissing", {"--dataset", "/nonexistent/ds"}, {"/nonexistent/ds"}, 1},
                      // Boost looped forever formatting the error for this one (fuzzing).
                      BadRun{"ValueWithBoostPlaceholder", {"--lr", "x%value%"}, {"%value%"}, 2}),
    [](const ::testing::TestParamInfo<BadRun>& i) { return std::string(i.param.name); });

// A sweep compares budgets: one that cannot hold even batch 1 is a result (max batch 0), not an
// error, and it must be measured without a crash and recorded like any other point.
TEST_F(BadTrainOptions, SweepRecordsABudgetBelowStaticMemoryAsMaxBatchZero) {
  const auto r = test::run_child(
      {"sweep",    "--device",       "cpu",       "--threads", "1",        "--dataset", test::small_cache().string(),
       "--models", "unet3d",         "--patches", "16",        "--stages", "3",         "--base-features",
       "4",        "--max-features", "8",         "--budgets", "1MiB",     "--output",  (dir() / "sweep").string()},
      dir() / "log");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const auto journal = test::read_file(dir() / "sweep" / "results.jsonl");
  ASSERT_EQ(test::count_lines(journal), 1u);
  EXPECT_EQ(nlohmann::json::parse(journal)["max_batch"], 0) << journal;
  EXPECT_EQ(test::partial_files(dir() / "sweep"), std::vector<std::string>{});
}

// ---- checkpoints that are not whole: predict and --resume refuse them by name ----

class BrokenCheckpoint : public test::TempDirTest {};

TEST_F(BrokenCheckpoint, TruncatedEmptyOrForeignCheckpointIsOneLineNamingIt) {
  const fs::path run = dir() / "run";
  ASSERT_EQ(test::run_child(test::tiny_train_args(run, 1), dir() / "log").exit_code, 0);
  const std::string good = test::read_file(run / "last.pt");
  const fs::path input = test::totalseg_dir() / "example_ct_sm.nii.gz";
  for (const std::string& bytes :
       {good.substr(0, good.size() / 2), std::string(), std::string(1000, 'P'), test::read_file(run / "config.json")}) {
    test::write_text(run / "last.pt", bytes);
    auto r = run_voxfit("predict --device cpu --checkpoint '" + (run / "last.pt").string() + "' --input '" +
                        input.string() + "' --output '" + (dir() / "pred").string() + "'");
    EXPECT_TRUE(clean_failure(r, {(run / "last.pt").string()}, 1));
    EXPECT_FALSE(fs::exists(dir() / "pred"));
    auto args = test::tiny_train_args(run, 2);
    args.push_back("--resume");
    r = test::run_child(args, dir() / "log");
    EXPECT_TRUE(clean_failure(r, {(run / "last.pt").string()}, 1));
  }
}

}  // namespace
}  // namespace voxfit
