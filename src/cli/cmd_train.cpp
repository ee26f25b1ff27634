#include <algorithm>
#include <cstdio>
#include <optional>

#include "voxfit/cli/commands.h"
#include "voxfit/cli/model_options.h"
#include "voxfit/cli/train_options.h"
#include "voxfit/core/error.h"
#include "voxfit/core/folder_lock.h"
#include "voxfit/core/units.h"
#include "voxfit/data/plan.h"
#include "voxfit/dist/communicator.h"
#include "voxfit/dist/launch.h"
#include "voxfit/dist/rank.h"
#include "voxfit/sweep/isolated_probe.h"
#include "voxfit/sweep/run_search.h"
#include "voxfit/sweep/sweep.h"

namespace voxfit::cli {

namespace {

// The command line a spawned rank runs: this one without --nproc.
std::vector<std::string> rank_command(const Args& args) {
  std::vector<std::string> out{"voxfit", "train"};
  for (const auto& a : without_options(args, {"--nproc"})) out.push_back(a);
  return out;
}

}  // namespace

int cmd_train(const Args& args) {
  CommandSpec spec{"train", "voxfit train --dataset D --model M --output RUN_DIR [options]",
                   "Trains a network on patches of a dataset (prepared into an HDF5 cache first) and writes "
                   "config.json, plan.json, log.jsonl, log.csv, tensorboard/, last.pt and best.pt to RUN_DIR."};
  add_model_options(spec);
  add_training_options(spec);
  add_device_options(spec);
  add_isolate_options(spec);
  spec.hidden.add_options()("probe-data-parallel", po::bool_switch());
  po::options_description r("Run");
  r.add_options()("output", po::value<std::string>()->value_name("RUN_DIR"), "the run folder (required)")(
      "batch", po::value<std::string>()->default_value("2")->value_name("B|max"),
      "patches per step, or max: the largest that trains under --vram/--card (found by a search first)")(
      "steps", po::value<int64_t>()->default_value(250)->value_name("N"), "optimiser steps")(
      "validate-every", po::value<int64_t>()->default_value(0)->value_name("N"),
      "steps between sliding-window validations (0: at the end only)")(
      "overlap", po::value<double>()->default_value(0.5)->value_name("F"), "sliding-window overlap")(
      "window-batch", po::value<int64_t>()->default_value(2)->value_name("N"), "windows per forward in validation")(
      "checkpoint-every", po::value<int64_t>()->default_value(0)->value_name("N"),
      "steps between checkpoints (0: at validations and the end)")(
      "log-every", po::value<int64_t>()->default_value(10)->value_name("N"),
      "steps between host syncs; each logs its steps (1: exact per-step timing)")(
      "stop-after", po::value<int64_t>()->default_value(0)->value_name("N"),
      "stop after step N with a checkpoint, to be continued with --resume")("resume", po::bool_switch(),
                                                                            "continue RUN_DIR/last.pt")(
      "cuda-graph", po::value<std::string>()->default_value("on")->value_name("on|off"),
      "on a CUDA GPU, replay the whole training step (forward, backward, loss scaling, AdamW) as one "
      "CUDA graph after 3 eager steps (fused AdamW on LibTorch >= 2.2, one process; CPU, SGD and "
      "data-parallel runs stay eager)")(
      "nproc", po::value<int>()->default_value(0)->value_name("N"),
      "data-parallel training on N local processes, one per GPU (cuda:0..N-1; Gloo on --device cpu); "
      "--batch is per process. Under torchrun or srun, leave it out: RANK/WORLD_SIZE or SLURM_PROCID/"
      "SLURM_NTASKS are read");
  spec.options.add(r);
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  if (!vm.count("model")) throw ConfigError("voxfit train: --model is required (voxfit models lists them)");
  if (!vm.count("output")) throw ConfigError("voxfit train: --output RUN_DIR is required");
  if (vm["isolate"].as<bool>() && vm["batch"].as<std::string>() != "max")
    throw ConfigError("--isolate: only a --batch max search has probes to isolate");

  const dist::RankInfo rank = dist::rank_from_environment();
  const int nproc = vm["nproc"].as<int>();
  if (nproc < 0) throw ConfigError("--nproc: expected 1 or more, got " + std::to_string(nproc));
  if (nproc > 0 && rank.source == "single") return dist::run_local_ranks(nproc, rank_command(args));

  const std::string model = vm["model"].as<std::string>();
  train::TrainOptions o = training_options_from(vm, model);
  std::unique_ptr<dist::Communicator> comm;
  if (rank.source != "single") {
    if (o.device.is_cuda()) o.device = parse_device("cuda:" + std::to_string(rank.local_rank), "LOCAL_RANK");
    comm = std::make_unique<dist::Communicator>(rank, o.device);
  }
  o.model = model;
  o.model_context = model_context_from(vm, model);
  o.step.channels_last = o.model_context.channels_last;
  o.step.cuda_graph = parse_on_off(vm["cuda-graph"].as<std::string>(), "--cuda-graph");
  o.output_dir = vm["output"].as<std::string>();
  const std::string batch = vm["batch"].as<std::string>();
  o.steps = vm["steps"].as<int64_t>();
  o.validate_every = vm["validate-every"].as<int64_t>();
  o.sliding_window.overlap = vm["overlap"].as<double>();
  o.sliding_window.window_batch = vm["window-batch"].as<int64_t>();
  o.checkpoint_every = vm["checkpoint-every"].as<int64_t>();
  o.log_every = vm["log-every"].as<int64_t>();
  o.stop_after = vm["stop-after"].as<int64_t>();
  o.resume = vm["resume"].as<bool>();
  // One writer per output folder: rank 0 (an isolated probe writes only its answer, for its run).
  std::optional<FolderLock> lock;
  if (!vm.count("probe-batch") && (!comm || comm->rank() == 0)) lock.emplace(o.output_dir);
  // Rank 0 prepares the cache; the others then find it up to date.
  if (comm && comm->rank() != 0) comm->barrier();
  o.cache_dir = prepared_cache(vm, o.output_dir / "cache");
  if (comm && comm->rank() == 0) comm->barrier();
  data::check_patch_fits(data::load_plan(o.cache_dir), o.model_context.patch);
  // An isolated probe's own process: one probe of the search, its answer to --probe-output.
  if (run_isolated_probe(vm, [&](std::int64_t b) {
        const auto s = sweep::run_search(o, vm["probe-data-parallel"].as<bool>());
        return sweep::run_probe_here(s.index, s.probe, o.budget, b);
      }))
    return 0;
  if (batch == "max") {
    sweep::IsolatedProbe isolated;
    if (vm["isolate"].as<bool>()) {
      // This command line on the prepared cache and this rank's device, as a plain process.
      std::vector<std::string> cmd{"voxfit", "train"};
      for (const auto& a : without_options(args, {"--nproc", "--dataset", "--cache", "--device"}, {"--isolate"}))
        cmd.push_back(a);
      for (const auto& a : {std::string("--dataset"), std::filesystem::absolute(o.cache_dir).string(),
                            std::string("--device"), o.device.str()})
        cmd.push_back(a);
      if (comm) cmd.push_back("--probe-data-parallel");
      isolated = sweep::isolated_probe(cmd, o.output_dir);
    }
    const auto e = sweep::search_max_batch(o, comm != nullptr, isolated);
    o.batch = e.max_batch;
    std::printf("--batch max: %lld fits under %s, %lld does not (%d probes, %.1f s%s)\n",
                static_cast<long long>(o.batch), o.budget.label().c_str(), static_cast<long long>(e.first_failing),
                e.probes, e.seconds, isolated ? ", each probe in its own process" : "");
    if (comm) o.batch = static_cast<int64_t>(-comm->max(-static_cast<double>(o.batch)));  // the smallest card's
  } else {
    o.batch = to_integer(batch).value_or(0);
    if (o.batch < 1 || std::to_string(o.batch) != batch)
      throw ConfigError("--batch: expected a positive integer or max, got '" + batch + "'");
  }

  const auto s = train::train_model(o, comm.get());
  if (comm && comm->rank() != 0) return 0;
  if (s.world_size > 1)
    std::printf("data parallel: %lld ranks x batch %lld\n", static_cast<long long>(s.world_size),
                static_cast<long long>(o.batch));
  std::printf(
      "trained %lld steps: loss %.4f, best validation Dice %.4f, median %.2f samples/s, "
      "loader wait %.1f%% after the first batch (%.2f s), peak %s allocated / %s reserved\n",
      static_cast<long long>(s.steps_done), s.final_loss, s.best_dice, s.median_samples_per_s,
      100.0 * s.data_wait_share, s.first_batch_wait_s, format_bytes(s.peak_allocated).c_str(),
      format_bytes(s.peak_reserved).c_str());
  return 0;
}

}  // namespace voxfit::cli
