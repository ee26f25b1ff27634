#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>

#include "voxfit/cli/commands.h"
#include "voxfit/cli/model_options.h"
#include "voxfit/cli/train_options.h"
#include "voxfit/core/error.h"
#include "voxfit/core/folder_lock.h"
#include "voxfit/core/paths.h"
#include "voxfit/core/units.h"
#include "voxfit/memory/card_table.h"
#include "voxfit/sweep/distribute.h"
#include "voxfit/sweep/isolated_probe.h"
#include "voxfit/sweep/journal.h"
#include "voxfit/sweep/report.h"
#include "voxfit/sweep/sweep.h"

namespace voxfit::cli {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> split_list(const std::string& text, char sep = ',') {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, sep)) {
    const auto b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b != std::string::npos) out.push_back(item.substr(b, e - b + 1));
  }
  return out;
}

// "I/N" of --shard.
std::pair<std::size_t, std::size_t> parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  try {
    if (slash != std::string::npos) {
      const auto i = std::stoul(text.substr(0, slash)), n = std::stoul(text.substr(slash + 1));
      if (n >= 1 && i < n && std::to_string(i) + "/" + std::to_string(n) == text) return {i, n};
    }
  } catch (const std::exception&) {
  }
  throw ConfigError("--shard: expected I/N with 0 <= I < N, got '" + text + "'");
}

const std::set<std::string> kDistributionOptions = {"--emit-slurm", "--parallel", "--shard", "--output",
                                                    "--dataset",    "--cache",    "--merge"};

// The command line of voxfit sweep (the grid, the probes, distribution).
CommandSpec sweep_spec() {
  CommandSpec spec{"sweep", "voxfit sweep --dataset D --output DIR [--config experiments/24gb_vs_48gb.ini] [options]",
                   "For every model x patch x precision x checkpointing x budget: the largest batch that trains "
                   "(found by real training probes: b fits, b+1 runs out of memory) and the throughput at each "
                   "batch. Writes DIR/results.jsonl (resumable journal), results.csv, summary.md and plots."};
  add_model_options(spec);
  add_training_options(spec);
  add_device_options(spec);
  add_isolate_options(spec);
  po::options_description g("Sweep grid (comma-separated lists)");
  g.add_options()("output", po::value<std::string>()->value_name("DIR"), "where results go (required)")(
      "models", po::value<std::string>()->value_name("LIST"), "networks [the --model value]")(
      "patches", po::value<std::string>()->value_name("LIST"),
      "patch sizes, cubic or DxHxW, e.g. 96,128 or 64x128x128 [the --patch value]")(
      "precisions", po::value<std::string>()->value_name("LIST"), "fp32, tf32, fp16, bf16 [the --precision value]")(
      "recompute-modes", po::value<std::string>()->value_name("LIST"), "none, blocks, all [the --recompute value]")(
      "checkpointing", po::value<std::string>()->value_name("LIST"),
      "the old spelling of --recompute-modes (deprecated)")(
      "budgets", po::value<std::string>()->value_name("LIST"),
      "card ids of data/cards.csv or sizes, e.g. rtx3090,a40 or 24GiB,48GiB [--card / --vram]")(
      "max-batch", po::value<int64_t>()->default_value(sweep::kMaxBatchCap)->value_name("B"),
      "never probe above this batch")("warmup-steps", po::value<int>()->default_value(2)->value_name("N"),
                                      "untimed training steps per probe")(
      "timed-steps", po::value<int>()->default_value(3)->value_name("N"), "timed training steps per probe (>= 1)")(
      "no-throughput-table", po::bool_switch(), "only the search's probes, no extra timing at powers of two")(
      "report-only", po::bool_switch(),
      "run nothing: rewrite results.csv, summary.md and the plots from DIR/results.jsonl (e.g. where gnuplot is)");
  po::options_description d("Distributed sweeps");
  d.add_options()(
      "parallel", po::value<int>()->default_value(0)->value_name("N"),
      "run the points on N local processes, one per GPU (cuda:0..N-1; all on the CPU with --device cpu), each "
      "journalling into DIR/points/gpuI, then merge them into DIR")(
      "emit-slurm", po::value<std::string>()->value_name("DIR"),
      "prepare the dataset, then write DIR/sweep.sbatch: a Slurm job array with one point per task, each "
      "journalling into DIR/points/TASK; run nothing. Submit with sbatch, then voxfit sweep --merge DIR")(
      "merge", po::value<std::string>()->value_name("DIR"),
      "join DIR/points/*/results.jsonl into DIR/results.jsonl and rewrite the reports; run nothing")(
      "shard", po::value<std::string>()->value_name("I/N"), "run only the points whose grid index is I modulo N");
  spec.options.add(d);
  spec.options.add(g);
  return spec;
}

// The sweep the options describe (the cache excepted): the grid, the probes' settings as a run's,
// each model's own parameters and optimiser.
sweep::SweepOptions sweep_options_from(const po::variables_map& vm) {
  sweep::SweepOptions o;
  o.output_dir = vm.count("emit-slurm") ? vm["emit-slurm"].as<std::string>() : vm["output"].as<std::string>();
  const auto list_or = [&](const char* key, const std::string& fallback) {
    return split_list(vm.count(key) ? vm[key].as<std::string>() : fallback);
  };
  o.grid.models = list_or("models", vm.count("model") ? vm["model"].as<std::string>() : "");
  if (o.grid.models.empty()) throw ConfigError("voxfit sweep: --models (or --model) is required");
  o.grid.patches.clear();
  // --patches items are cubic sizes (96) or DxHxW (16x32x32); --patch keeps its own comma syntax.
  if (!vm.count("patches") && vm.count("patch")) {
    o.grid.patches.push_back(parse_patch(vm["patch"].as<std::string>(), 3));
  } else {
    for (auto p : list_or("patches", "96")) {
      std::replace(p.begin(), p.end(), 'x', ',');
      o.grid.patches.push_back(parse_patch(p, 3, "--patches"));
    }
  }
  o.grid.precisions.clear();
  for (const auto& p : list_or("precisions", vm["precision"].as<std::string>()))
    o.grid.precisions.push_back(train::parse_precision(p));
  o.grid.checkpointing.clear();
  std::string modes = vm.count("recompute-modes") ? vm["recompute-modes"].as<std::string>() : recompute_text(vm);
  if (vm.count("checkpointing")) {
    warn_deprecated("--checkpointing LIST", "--recompute-modes LIST");
    if (vm.count("recompute-modes"))
      throw ConfigError("--recompute-modes and --checkpointing (its old spelling): give one");
    modes = vm["checkpointing"].as<std::string>();
  }
  for (const auto& c : split_list(modes))
    o.grid.checkpointing.push_back(models::parse_checkpoint(c, "--recompute-modes"));
  if (vm.count("budgets"))
    o.grid.budgets = parse_budgets(vm["budgets"].as<std::string>());
  else
    o.grid.budgets = {budget_from(vm)};
  if (o.grid.budgets.front().kind == memory::BudgetKind::None)
    throw ConfigError("voxfit sweep: a budget is required (--budgets rtx3090,a40, --card or --vram)");

  const train::TrainOptions t = training_options_from(vm, o.grid.models.front());
  o.probe.step = t.step;
  o.probe.loader = t.loader;
  o.probe.device = t.device;
  o.probe.seed = t.seed;
  o.probe.warmup_steps = vm["warmup-steps"].as<int>();
  o.probe.timed_steps = vm["timed-steps"].as<int>();
  if (o.probe.warmup_steps < 0 || o.probe.timed_steps < 1)
    throw ConfigError("--warmup-steps must be >= 0 and --timed-steps >= 1");
  o.validation_fraction = t.validation_fraction;
  o.fold = t.fold;
  for (const auto& m : o.grid.models) {
    o.optimizers[m] = training_options_from(vm, m).step.optimizer;  // --optimizer, --lr, ... over m's default
    const auto ctx = model_context_from(vm, m, /*only_own_params=*/true);
    o.model_params[m] = ctx.params;
    o.probe.model_context.attention = ctx.attention;
    o.channels_last[m] = ctx.channels_last;
  }
  o.max_batch = vm["max-batch"].as<int64_t>();
  o.throughput_table = !vm["no-throughput-table"].as<bool>();
  return o;
}

}  // namespace

int cmd_sweep(const Args& args) {
  CommandSpec spec = sweep_spec();
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  if (vm.count("merge")) {
    const fs::path dir = vm["merge"].as<std::string>();
    const FolderLock lock(dir);
    const auto entries = sweep::merge_journals(sweep::point_journals(dir), dir);
    std::printf("%s: %zu points merged (results.jsonl, results.csv, summary.md, plots)\n", dir.c_str(), entries.size());
    return 0;
  }
  if (vm.count("emit-slurm")) {
    if (vm.count("output")) throw ConfigError("--emit-slurm DIR: the results go to DIR; leave --output out");
  } else if (!vm.count("output")) {
    throw ConfigError("voxfit sweep: --output DIR is required");
  }
  if (vm["report-only"].as<bool>()) {
    const fs::path dir = vm["output"].as<std::string>();
    const auto entries = sweep::read_results(dir / "results.jsonl");
    if (entries.empty()) throw ConfigError((dir / "results.jsonl").string() + ": no sweep results to report");
    sweep::write_reports(entries, dir);
    std::printf("%s: %zu points reported (results.csv, summary.md, plots)\n", dir.c_str(), entries.size());
    return 0;
  }

  sweep::SweepOptions o = sweep_options_from(vm);
  // One writer per output folder; an isolated probe writes only its answer file, for its sweep.
  std::optional<FolderLock> lock;
  if (!vm.count("probe-batch")) lock.emplace(o.output_dir);
  o.cache_dir = prepared_cache(vm, o.output_dir / "cache");
  // An isolated probe's own process: one probe of one point, its answer to --probe-output.
  if (run_isolated_probe(vm, [&](std::int64_t batch) {
        if (!vm.count("probe-point")) throw ConfigError("--probe-batch needs --probe-point KEY in voxfit sweep");
        return sweep::run_sweep_probe(o, vm["probe-point"].as<std::string>(), batch);
      }))
    return 0;
  if (vm.count("shard")) std::tie(o.shard, o.shards) = parse_shard(vm["shard"].as<std::string>());
  const std::size_t points = sweep::grid_size(o.grid);

  // The commands other processes run: this one on the prepared cache, without distribution
  // options, with `extra` appended; `drop_switches` and (unless kept) --device are left out too.
  const auto child_command = [&args, &o](const std::vector<std::string>& extra, bool keep_device = true,
                                         const std::set<std::string>& drop_switches = {}) {
    std::vector<std::string> cmd{"voxfit", "sweep"};
    auto drop = kDistributionOptions;
    if (!keep_device) drop.insert("--device");
    for (const auto& a : without_options(args, drop, drop_switches)) cmd.push_back(a);
    cmd.push_back("--dataset");
    cmd.push_back(fs::absolute(o.cache_dir).string());
    cmd.insert(cmd.end(), extra.begin(), extra.end());
    return cmd;
  };
  const sweep::PointCommand point_command = [&](const std::string& shard, const std::string& output, bool keep_device) {
    return child_command({"--shard", shard, "--output", output}, keep_device);
  };
  if (vm["isolate"].as<bool>())
    o.isolate = [child_command, &o](const std::string& key) {
      return sweep::isolated_probe(
          child_command({"--output", fs::absolute(o.output_dir).string(), "--probe-point", key}, true, {"--isolate"}),
          o.output_dir);
    };
  if (vm.count("emit-slurm")) {
    const auto script = sweep::write_slurm_array(o.output_dir, points, point_command);
    std::printf(
        "%s: a Slurm job array of %zu points (one per task); submit it with sbatch, then run "
        "voxfit sweep --merge %s\n",
        script.c_str(), points, fs::absolute(o.output_dir).c_str());
    return 0;
  }
  if (const int n = vm["parallel"].as<int>(); n != 0) {
    std::printf("sweep: %zu points on %d processes\n", points, n);
    const auto entries = sweep::run_parallel(o.output_dir, n, o.probe.device.is_cuda(), point_command);
    std::ifstream summary(o.output_dir / "summary.md");
    std::cout << "\n"
              << summary.rdbuf() << "\n"
              << entries.size() << " points merged into " << o.output_dir.string() << "/\n";
    return 0;
  }

  o.progress = [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  std::printf("%-12s %-12s %-5s %-7s %-12s %9s %7s %7s %10s\n", "model", "patch", "prec", "ckpt", "budget", "max_batch",
              "probes", "seconds", "samples/s");
  sweep::run_sweep(o, [](const sweep::PointResult& e) {
    if (!e.skipped.empty()) {
      std::printf("%-12s %-12s %-5s %-7s %-12s skipped: %s\n", e.model.c_str(), e.patch.c_str(), e.precision.c_str(),
                  e.checkpoint.c_str(), e.budget.c_str(), e.skipped.c_str());
      return;
    }
    std::printf("%-12s %-12s %-5s %-7s %-12s %9lld %7d %7.1f %10.2f\n", e.model.c_str(), e.patch.c_str(),
                e.precision.c_str(), e.checkpoint.c_str(), e.budget.c_str(), static_cast<long long>(e.max_batch),
                e.probes, e.seconds, e.samples_per_s);
    std::fflush(stdout);
  });
  std::ifstream summary(o.output_dir / "summary.md");
  std::cout << "\n" << summary.rdbuf() << "\nresults in " << o.output_dir.string() << "/\n";
  return 0;
}

}  // namespace voxfit::cli
