// A TorchScript network as voxfit's network (models/scripted.h, issue 49), on the fixtures of
// tests/models/scripted/ (make_scripted.py: small MONAI networks scripted by torch 2.11, and
// networks wrong in one way each): its tensors counted and stepped once each, three training steps
// against the same steps in PyTorch, and every bad file refused in one line before anything runs.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "support/test_support.h"
#include "voxfit/core/error.h"
#include "voxfit/core/sha256.h"
#include "voxfit/memory/cpu_budget.h"
#include "voxfit/memory/oom.h"
#include "voxfit/models/scripted.h"
#include "voxfit/sweep/journal.h"
#include "voxfit/train/train_step.h"

namespace voxfit::models {
namespace scripted_test {

namespace fs = std::filesystem;

fs::path fixture(const std::string& name) { return test::source_dir() / "tests" / "models" / "scripted" / name; }

// The fixtures were saved by torch 2.11: a LibTorch that cannot read them (Debian's 1.13) skips
// the tests that load them, with the reason its reader gives.
std::optional<std::string> unreadable_fixtures() {
  static const std::optional<std::string> reason = []() -> std::optional<std::string> {
    try {
      (void)load_scripted(fixture("dynunet.ts"));
      return std::nullopt;
    } catch (const IoError& e) {
      if (std::string(e.what()).find("written by a newer torch") == std::string::npos) throw;
      return std::string(e.what());
    }
  }();
  return reason;
}

#define SKIP_UNLESS_FIXTURES_READABLE() \
  if (const auto why = unreadable_fixtures(); why.has_value()) GTEST_SKIP() << *why

nlohmann::json fixture_meta(const std::string& name) {
  std::ifstream in(fixture("scripted.json"));
  return nlohmann::json::parse(in).at("networks").at(name);
}

ModelContext context(int64_t patch = 32, int classes = 4) {
  ModelContext ctx;
  ctx.in_channels = 1;
  ctx.num_classes = classes;
  ctx.patch = {patch, patch, patch};
  return ctx;
}

// The closed-formula batch of train_steps.py: image sin(0.1 i), label 7 i mod classes.
data::Batch formula_batch(const std::vector<int64_t>& shape, int64_t classes) {
  int64_t n = 1;
  for (const auto s : shape) n *= s;
  data::Batch b;
  b.image = torch::arange(n, torch::kFloat).mul(0.1).sin().reshape(shape);
  std::vector<int64_t> label_shape = shape;
  label_shape[1] = 1;
  b.label = torch::arange(n / shape[1], torch::kLong).mul(7).remainder(classes).reshape(label_shape);
  return b;
}

train::StepOptions plain_adamw() {
  train::StepOptions o;
  o.spatial_augment.reset();
  return o;
}

TEST(Scripted, NamesAreFilesAndLoadAsNetworksWithPythonsCount) {
  SKIP_UNLESS_FIXTURES_READABLE();
  EXPECT_TRUE(is_scripted_model("net.ts"));
  EXPECT_TRUE(is_scripted_model("runs/a/network"));
  EXPECT_TRUE(is_scripted_model("model.pt"));
  EXPECT_FALSE(is_scripted_model("unetr"));
  EXPECT_FALSE(is_scripted_model("resenc_unet"));
  for (const char* name : {"dynunet.ts", "unetr.ts", "two_scale.ts"}) {
    const Network net = make_model(fixture(name).string(), context());
    EXPECT_EQ(count_parameters(*net), fixture_meta(name).at("parameters").get<int64_t>()) << name;
    EXPECT_EQ(find_model(fixture(name).string()).reference_parameters, count_parameters(*net)) << name;
  }
}

TEST(Scripted, SharedTensorsAreRegisteredAndSteppedOnce) {
  SKIP_UNLESS_FIXTURES_READABLE();
  const Network net = make_model(fixture("dynunet.ts").string(), context());
  const auto& scripted = dynamic_cast<const ScriptedNetworkImpl&>(*net);
  // LibTorch lists a shared submodule's tensors under each path; voxfit registers each once.
  const auto params = net->parameters();
  std::set<const c10::TensorImpl*> distinct;
  for (const auto& p : params) distinct.insert(p.unsafeGetTensorImpl());
  EXPECT_EQ(distinct.size(), params.size());
  EXPECT_GT(scripted.listed_parameter_entries(), static_cast<int64_t>(params.size()));
  ASSERT_FALSE(scripted.aliases().empty());
  // Every name Python's state dict has is a registered name or an alias of one.
  std::set<std::string> names;
  for (const auto& p : net->named_parameters()) names.insert(p.key());
  for (const auto& b : net->named_buffers()) names.insert(b.key());
  for (const auto& [name, more] : scripted.aliases()) names.insert(more.begin(), more.end());
  const auto keys = fixture_meta("dynunet.ts").at("state_dict_keys").get<std::set<std::string>>();
  EXPECT_EQ(names, keys);

  // AdamW's first step moves a parameter by lr (m / sqrt(v) = +-1) plus its decay; a tensor the
  // optimiser held twice would move by about 2 lr.
  std::map<std::string, torch::Tensor> before;
  for (const auto& p : net->named_parameters()) before[p.key()] = p.value().detach().clone();
  train::TrainStep step(net, torch::kCPU, plain_adamw());
  const double lr = 1e-3;
  step.run(formula_batch({1, 1, 32, 32, 32}, 4), lr, 0);
  for (const auto& p : net->named_parameters()) {
    const double moved = (p.value().detach() - before[p.key()]).abs().max().item<double>();
    EXPECT_LE(moved, lr * 1.01 + 1e-5 * lr * before[p.key()].abs().max().item<double>()) << p.key();
  }
  // The shared tensors are the scripted module's own: its forward sees the step.
  EXPECT_GT((scripted.named_parameters()[scripted.aliases().begin()->first] - before[scripted.aliases().begin()->first])
                .abs()
                .max()
                .item<double>(),
            0.0);
}

TEST(Scripted, ThreeTrainingStepsMatchPyTorch) {
  SKIP_UNLESS_FIXTURES_READABLE();
  const auto python = test::python_with("torch");
  if (!python) GTEST_SKIP() << "no python3 with torch (set VOXFIT_PYTHON): the PyTorch side cannot run";
  const std::vector<int64_t> shape = {2, 1, 32, 32, 32};
  for (const char* name : {"dynunet.ts", "unetr.ts"}) {
    const auto r = test::run_command(*python + " '" + fixture("train_steps.py").string() + "' '" +
                                     fixture(name).string() + "' 3 2,1,32,32,32");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto expected = nlohmann::json::parse(r.out).get<std::vector<double>>();
    train::TrainStep step(make_model(fixture(name).string(), context()), torch::kCPU, plain_adamw());
    const auto batch = formula_batch(shape, 4);
    for (int i = 0; i < 3; ++i) {
      const double loss = step.run(batch, 1e-3, i).loss.item<double>();
      EXPECT_NEAR(loss, expected[i], 1e-4 * std::abs(expected[i])) << name << " step " << i;
    }
  }
}

TEST(Scripted, DeepSupervisionListsTrainEveryOutputAndEvalTheFirst) {
  SKIP_UNLESS_FIXTURES_READABLE();
  const Network net = make_model(fixture("two_scale.ts").string(), context());
  net->train();
  const auto out = net->forward(torch::zeros({2, 1, 32, 32, 32}));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].sizes().vec(), (std::vector<int64_t>{2, 4, 32, 32, 32}));
  EXPECT_EQ(out[1].sizes().vec(), (std::vector<int64_t>{2, 4, 16, 16, 16}));
  net->eval();
  EXPECT_EQ(net->forward(torch::zeros({2, 1, 32, 32, 32})).size(), 1u);
  ModelContext first_only = context();
  first_only.params["deep_supervision"] = "false";
  const Network one = make_model(fixture("two_scale.ts").string(), first_only);
  one->train();
  EXPECT_EQ(one->forward(torch::zeros({2, 1, 32, 32, 32})).size(), 1u);
  train::TrainStep step(make_model(fixture("two_scale.ts").string(), context()), torch::kCPU, plain_adamw());
  EXPECT_TRUE(torch::isfinite(step.run(formula_batch({2, 1, 32, 32, 32}, 4), 1e-3, 0).loss).item<bool>());
}

TEST(Scripted, ChannelsLastStoresTheConvolutionWeightsNdhwcAndComputesTheSame) {
  SKIP_UNLESS_FIXTURES_READABLE();
  ModelContext cl = context();
  cl.channels_last = true;
  const Network plain = make_model(fixture("dynunet.ts").string(), context());
  const Network last = make_model(fixture("dynunet.ts").string(), cl);
  int converted = 0;
  for (const auto& p : last->parameters())
    if (p.dim() == 5) {
      EXPECT_TRUE(p.is_contiguous(at::MemoryFormat::ChannelsLast3d));
      ++converted;
    }
  EXPECT_GT(converted, 0);
  plain->eval();
  last->eval();
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({2, 1, 32, 32, 32});
  const auto a = plain->forward(x).front();
  const auto b = last->forward(x.contiguous(at::MemoryFormat::ChannelsLast3d)).front();
  EXPECT_TRUE(torch::allclose(a, b, 1e-4, 1e-5)) << (a - b).abs().max().item<double>();
}

TEST(Scripted, TheForwardIsChargedToTheTopLevelChildrenItCalls) {
  SKIP_UNLESS_FIXTURES_READABLE();
  const Network net = make_model(fixture("unetr.ts").string(), context());
  const auto& children = dynamic_cast<const ScriptedNetworkImpl&>(*net).attributed_children();
  for (const char* child : {"vit", "encoder1", "decoder2", "out"})
    EXPECT_NE(std::find(children.begin(), children.end(), child), children.end()) << child;
}

TEST(Scripted, AnAllocationFailureInsideTheInterpreterIsOutOfMemory) {
  SKIP_UNLESS_FIXTURES_READABLE();
  // The interpreter rethrows the allocator's error as a plain one with its traceback first: the
  // sweep's and the trainer's out-of-memory handling must still see it (a real one, in forward and
  // in backward, under a 64 MiB CPU budget).
  const Network net = make_model(fixture("unetr.ts").string(), context());
  net->train();
  const auto x = torch::randn({8, 1, 32, 32, 32});
  for (const bool backward : {false, true}) {
    std::optional<torch::Tensor> logits;
    if (backward) logits = net->forward(x).front();  // unbudgeted: backward then allocates under the cap
    try {
      const memory::ScopedCpuBudget budget(backward ? 8 << 20 : 64 << 20);
      if (backward)
        logits->sum().backward();
      else
        (void)net->forward(x);
      ADD_FAILURE() << "no allocation failure (backward " << backward << ")";
    } catch (const std::exception& e) {
      EXPECT_TRUE(memory::is_oom(e)) << backward << ": " << e.what();
    }
  }
  EXPECT_FALSE(memory::is_oom(std::runtime_error(
      "The following operation failed in the TorchScript interpreter.\nTraceback of TorchScript (most recent "
      "call last):\nRuntimeError: shapes cannot be multiplied")));
  EXPECT_EQ(error_line("The following operation failed in the TorchScript interpreter.\n  File x.py\n"
                       "builtins.RuntimeError: this network refuses every input\n"),
            "RuntimeError: this network refuses every input");
}

// Each bad file: one line naming the file and the problem, a non-zero exit, no crash.
struct BadFile {
  std::string file, extra, expected;
  int exit_code;
};

class ScriptedBadFile : public ::testing::TestWithParam<BadFile> {};

TEST_P(ScriptedBadFile, IsRefusedInOneLineNamingTheFile) {
  SKIP_UNLESS_FIXTURES_READABLE();
  const BadFile& b = GetParam();
  const fs::path file = fixture(b.file);
  const auto r = test::run_voxfit("models --model '" + file.string() + "' --patch 32 " + b.extra);
  EXPECT_EQ(r.exit_code, b.exit_code) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("voxfit: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(file.string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(b.expected), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(
    Files, ScriptedBadFile,
    ::testing::Values(BadFile{"not_archive.ts", "--classes 4", "not a TorchScript archive", 1},
                      BadFile{"truncated.ts", "--classes 4", "a damaged TorchScript archive", 1},
                      BadFile{"future.ts", "--classes 4", "archive format version 99", 1},
                      BadFile{"missing.ts", "--classes 4", "no such TorchScript file", 1},
                      BadFile{"throws.ts", "--classes 4", "RuntimeError: this network refuses every input", 1},
                      BadFile{"scalar.ts", "--classes 4", "a tensor of shape []", 1},
                      BadFile{"half_size.ts", "--classes 4", "need the input's spatial size", 1},
                      BadFile{"dynunet.ts", "--classes 3", "predicts 4 classes, the dataset has 3", 2},
                      BadFile{"dynunet.ts", "--classes 4 --in-channels 2", "to have 1 channels, but got 2", 1},
                      BadFile{"weights.pt", "--classes 4", "holds no TorchScript module", 1},
                      BadFile{"damaged_code.ts", "--classes 4", "a damaged TorchScript archive (LibTorch", 1},
                      BadFile{"dynunet.ts", "--classes 4 --feature-size 8", "--feature-size is not a parameter", 2},
                      BadFile{"dynunet.ts", "--classes 4 --deep-supervision maybe", "expected true or false", 2}),
    [](const auto& info) {
      std::string n = info.param.file.substr(0, info.param.file.find('.')) + std::to_string(info.index);
      return n;
    });

TEST(Scripted, AModuleWithoutForwardIsNotANetwork) {
  // LibTorch's torch::save writes a tensor as an attribute of a module without methods.
  const fs::path dir = fs::temp_directory_path() / ("voxfit_scripted_weights_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path weights = dir / "tensor.pt";
  torch::save(torch::ones({3}), weights.string());
  try {
    (void)load_scripted(weights);
    ADD_FAILURE() << "loaded " << weights;
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(weights.string() + ": a TorchScript archive without a forward method"),
              std::string::npos)
        << e.what();
  }
  remove_tree(dir);
}

// `voxfit train --model FILE.ts`: the run keeps the file, so predict, export and --resume need the
// run folder alone; a network that fails its check forward writes nothing.
class ScriptedRun : public test::TempDirTest {
 protected:
  std::string train(const fs::path& model, const fs::path& run, int steps, const std::string& extra = "") {
    return "train --device cpu --threads 1 --dataset '" + test::prepared_ct_cache().string() + "' --model '" +
           model.string() + "' --patch 32 --batch 1 --steps " + std::to_string(steps) +
           " --loader-threads 1 --no-augment --log-every 1 --output '" + run.string() + "'" + extra;
  }
};

TEST_F(ScriptedRun, TheRunFolderAloneResumesPredictsAndExports) {
  SKIP_UNLESS_FIXTURES_READABLE();
  const fs::path mine = dir() / "mine" / "my_dynunet.ts", run = dir() / "run";
  fs::create_directories(mine.parent_path());
  fs::copy_file(fixture("dynunet.ts"), mine);
  auto r = test::run_voxfit(train(mine, run, 2));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream in(run / "config.json");
  const auto config = nlohmann::json::parse(in);
  EXPECT_EQ(config.at("model"), "network.ts");
  EXPECT_EQ(config.at("model_file").at("sha256"), core::sha256_file(fixture("dynunet.ts")));
  EXPECT_EQ(core::sha256_file(run / "network.ts"), core::sha256_file(fixture("dynunet.ts")));
  remove_tree(mine.parent_path());

  r = test::run_voxfit(train(run / "network.ts", run, 2, " --resume"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("resuming"), std::string::npos) << r.out;
  // Another network under the same run: refused, the run untouched.
  r = test::run_voxfit(train(fixture("unetr.ts"), run, 2, " --resume"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("the TorchScript file differs"), std::string::npos) << r.err;

  const fs::path in_dir = dir() / "in", out = dir() / "out";
  fs::create_directories(in_dir);
  fs::copy_file(test::totalseg_dir() / "example_ct_sm.nii.gz", in_dir / "ct_0000.nii.gz");
  r = test::run_voxfit("predict --device cpu --threads 1 --checkpoint '" + (run / "last.pt").string() + "' --input '" +
                       in_dir.string() + "' --output '" + out.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(fs::exists(out / "ct.nii.gz"));

  // The export holds every key of Python's state dict (a shared tensor under each of its names).
  r = test::run_voxfit("export --checkpoint '" + (run / "last.pt").string() + "' --output '" +
                       (dir() / "w.pt").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream bytes(dir() / "w.pt", std::ios::binary);
  const std::vector<char> data((std::istreambuf_iterator<char>(bytes)), std::istreambuf_iterator<char>());
  const auto dict = torch::pickle_load(data).toGenericDict();
  std::set<std::string> keys;
  for (const auto& item : dict) keys.insert(item.key().toStringRef());
  EXPECT_EQ(keys, fixture_meta("dynunet.ts").at("state_dict_keys").get<std::set<std::string>>());
  // ... and MONAI's DynUNet, built as the fixture was, loads it strictly.
  const auto python = test::python_with("torch, monai");
  if (!python) GTEST_SKIP() << "no python3 with torch and MONAI (set VOXFIT_PYTHON): the strict load is not run";
  r = test::run_command(*python + " -c \"import sys, torch; sys.path.insert(0, '" + fixture("").string() +
                        "'); from make_scripted import dynunet; dynunet().load_state_dict(torch.load('" +
                        (dir() / "w.pt").string() + "'), strict=True); print('loaded')\"");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("loaded"), std::string::npos) << r.out << r.err;
}

TEST_F(ScriptedRun, ANetworkThatFailsItsCheckWritesNothing) {
  SKIP_UNLESS_FIXTURES_READABLE();
  for (const char* bad : {"throws.ts", "half_size.ts", "truncated.ts"}) {
    const fs::path run = dir() / bad;
    const auto r = test::run_voxfit(train(fixture(bad), run, 1));
    EXPECT_EQ(r.exit_code, 1) << bad << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(fixture(bad).string()), std::string::npos) << r.err;
    // The folder holds at most its lock (taken before the dataset is read): no config, copy or checkpoint.
    if (fs::exists(run))
      for (const auto& e : fs::directory_iterator(run)) EXPECT_EQ(e.path().filename(), ".voxfit.lock") << bad;
  }
}

TEST_F(ScriptedRun, SweepFindsAnExactBoundaryWithABreakdownPerChildThatSumsToThePeak) {
  SKIP_UNLESS_FIXTURES_READABLE();
  const auto r = test::run_voxfit("sweep --device cpu --threads 1 --dataset '" + test::prepared_ct_cache().string() +
                                  "' --models '" + fixture("dynunet.ts").string() +
                                  "' --patches 32 --budgets 150MiB --warmup-steps 1 --timed-steps 1"
                                  " --no-throughput-table --output '" +
                                  (dir() / "out").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto entries = sweep::read_journal(dir() / "out" / "results.jsonl");
  ASSERT_EQ(entries.size(), 1u);
  const auto max_batch = entries[0].at("max_batch").get<int64_t>();
  EXPECT_GE(max_batch, 1);
  EXPECT_EQ(entries[0].at("first_failing").get<int64_t>(), max_batch + 1);
  ASSERT_FALSE(entries[0].at("memory_breakdown").empty());
  for (const auto& [batch, b] : entries[0].at("memory_breakdown").items()) {
    int64_t sum = 0;
    std::set<std::string> names;
    for (const auto& part : b.at("parts")) {
      sum += part.at("bytes").get<int64_t>();
      names.insert(part.at("name").get<std::string>());
    }
    EXPECT_EQ(sum, b.at("peak_allocated").get<int64_t>()) << batch;
    EXPECT_TRUE(names.count("skip_layers") && names.count("output_block")) << batch;  // DynUNet's children
  }
}

}  // namespace scripted_test
}  // namespace voxfit::models
