#include "voxfit/train/trainer.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/error.h"
#include "voxfit/core/host_memory.h"
#include "voxfit/core/provenance.h"
#include "voxfit/core/runtime.h"
#include "voxfit/core/sha256.h"
#include "voxfit/core/units.h"
#include "voxfit/data/plan.h"
#include "voxfit/data/preprocess.h"
#include "voxfit/kernels/conv_of_concat.h"
#include "voxfit/kernels/instance_norm_act.h"
#include "voxfit/memory/breakdown_plot.h"
#include "voxfit/memory/memory_snapshot.h"
#include "voxfit/memory/memory_tracker.h"
#include "voxfit/memory/oom.h"
#include "voxfit/models/scripted.h"
#include "voxfit/train/checkpoint.h"
#include "voxfit/train/run_log.h"
#include "voxfit/train/step_memory.h"

namespace voxfit::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

void sync(torch::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index() < 0 ? 0 : device.index());
}

// A run of a TorchScript network keeps a copy of the file under this name beside config.json, whose
// "model" names it (checkpoint_model reads it from the checkpoint's folder) and whose "model_file"
// holds the source's path and SHA-256: predict, export and --resume need nothing else.
constexpr const char* kScriptedCopy = "network.ts";

nlohmann::json config_json(const TrainOptions& o, const data::Plan& plan) {
  nlohmann::json params = nlohmann::json::object();
  for (const auto& [k, v] : o.model_context.params) params[k] = v;
  const bool scripted = models::is_scripted_model(o.model);
  nlohmann::json config = {{"voxfit", voxfit_version()},
                           {"torch", torch_version()},
                           {"provenance", provenance(o.device)},
                           {"cache", fs::absolute(o.cache_dir).string()},
                           {"dataset", plan.dataset_name},
                           {"model", scripted ? std::string(kScriptedCopy) : o.model},
                           {"model_params", params},
                           {"in_channels", o.model_context.in_channels},
                           {"classes", o.model_context.num_classes},
                           {"patch", o.model_context.patch},
                           {"attention", models::to_string(o.model_context.attention)},
                           {"checkpoint", models::to_string(o.model_context.checkpoint)},
                           {"channels_last", o.model_context.channels_last},
                           {"kernels", kernels::to_string(kernels::kernel_mode())},
                           {"lean_decoders", kernels::lean_decoders()},
                           {"batch", o.batch},
                           {"steps", o.steps},
                           {"precision", to_string(o.step.precision)},
                           {"optimizer", to_string(o.step.optimizer.kind)},
                           {"lr", o.step.optimizer.lr},
                           {"weight_decay", o.step.optimizer.weight_decay},
                           {"clip_grad_norm", o.step.optimizer.clip_grad_norm},
                           {"schedule", to_string(o.schedule.kind)},
                           {"oversample", o.loader.oversample_foreground},
                           {"augment",
                            {{"enabled", o.loader.augment.enabled},
                             {"flip_probability", o.loader.augment.flip_probability},
                             {"intensity", o.loader.augment.enabled && o.loader.augment.intensity},
                             {"spatial", o.step.spatial_augment.has_value()}}},
                           {"seed", o.seed},
                           {"device", o.device.str()},
                           {"budget", o.budget.label()}};
  if (scripted)
    config["model_file"] = {{"source", fs::absolute(o.model).lexically_normal().string()},
                            {"sha256", core::sha256_file(o.model)}};
  return config;
}

// A resumed run must be the same run: these settings decide the weights.
void check_resumable(const nlohmann::json& saved, const nlohmann::json& now, const fs::path& ckpt) {
  for (const char* key : {"model", "model_params", "patch", "batch", "steps", "precision", "optimizer", "lr",
                          "schedule", "seed", "classes", "in_channels"}) {
    if (saved.value(key, nlohmann::json()) != now[key])
      throw ConfigError(ckpt.string() + ": cannot resume: '" + key + "' was " +
                        saved.value(key, nlohmann::json()).dump() + ", now " + now[key].dump());
  }
  const auto hash = [](const nlohmann::json& c) {
    return c.value("model_file", nlohmann::json::object()).value("sha256", "");
  };
  if (hash(saved) != hash(now))
    throw ConfigError(ckpt.string() +
                      ": cannot resume: the TorchScript file differs from the one the run trained (SHA-256 " +
                      hash(saved) + ", now " + hash(now) + ")");
  // Runs from before the split was recorded have none to compare.
  if (saved.contains("split") && saved["split"] != now["split"])
    throw ConfigError(ckpt.string() + ": cannot resume: the split was " + saved["split"].value("source", "") +
                      " fold " + saved["split"].value("fold", nlohmann::json()).dump() + ", now " +
                      now["split"].value("source", "") + " fold " +
                      now["split"].value("fold", nlohmann::json()).dump() + " (or its cases changed)");
}

// Where the run's split came from and what it validates on, for config.json.
nlohmann::json split_json(const data::RunSplit& s) {
  return {{"source", s.source},
          {"file", s.file},
          {"fold", s.fold ? nlohmann::json(*s.fold) : nlohmann::json()},
          {"train_cases", s.train.size()},
          {"validation", s.validation}};
}

// The run's memory breakdown (the logging window with the largest peak, and the largest
// validation peak) into config.json, and its stacked bar as memory-breakdown.png.
void write_run_breakdown(const fs::path& dir, nlohmann::json breakdown, std::uint64_t validation_peak) {
  if (breakdown.is_null()) return;
  breakdown["validation_peak_allocated"] = validation_peak;
  const fs::path config_file = dir / "config.json";
  std::ifstream in(config_file);
  nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) throw IoError(config_file.string() + ": not valid JSON, cannot add the memory breakdown");
  config["memory_breakdown"] = breakdown;
  write_file_atomic(config_file, config.dump(2) + "\n");
  const std::string why =
      memory::write_breakdown_bars({{"batch " + std::to_string(breakdown.value("batch", 0)), breakdown}},
                                   dir / "memory-breakdown.png", "Memory at the training step's peak");
  if (!why.empty()) std::fprintf(stderr, "no memory-breakdown.png: %s\n", why.c_str());
}

// The one line an out-of-memory step ends a run with: where it failed (phase, forward block), the
// peak it reached against the budget, and the largest parts of that peak (memory breakdown).
std::string out_of_memory_line(const std::exception& e, const memory::MemoryTracker& tracker, TrainStep& step,
                               const data::Batch& batch, std::int64_t step_number) {
  std::string where = "the training step";
  if (const auto& f = tracker.failure())
    where = "the " + memory::to_string(f->phase) + (f->block.empty() ? "" : " (in " + f->block + ")");
  const auto b = step_breakdown(tracker, step, batch);
  std::vector<memory::BreakdownPart> parts = b.parts;
  std::sort(parts.begin(), parts.end(), [](const auto& x, const auto& y) { return x.bytes > y.bytes; });
  std::string largest;
  for (size_t i = 0; i < parts.size() && i < 4; ++i) {
    if (parts[i].bytes <= 0) break;
    largest += (i ? ", " : "") + parts[i].name + " " + format_bytes(static_cast<std::uint64_t>(parts[i].bytes));
  }
  std::string line = "out of memory in " + where + " of step " + std::to_string(step_number) + " at batch " +
                     std::to_string(batch.image.size(0)) + ": peak " + format_bytes(b.peak_allocated) + " allocated";
  if (b.usable > 0) line += " of " + format_bytes(b.usable) + " usable";
  if (!largest.empty()) line += "; largest: " + largest;
  std::smatch asked;
  const std::string what = e.what();
  if (std::regex_search(what, asked, std::regex("[Tt]ried to allocate ([0-9.]+ ?[KMGT]?i?B)")))
    line += "; it asked for " + asked[1].str() + " more";
  return line;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A run's folder: a new run writes config.json, the plan it trains on and splits.json (nnU-Net's
// format: every fold of the split's source; config.json's "split" says which); a resumed one
// checks that it is the same run, loads last.pt and clears the temp files its killed predecessor
// left. Returns the checkpoint state the loop starts from.
CheckpointMeta open_run(const TrainOptions& o, const nlohmann::json& config, const data::RunSplit& split,
                        TrainStep& step, bool main_rank) {
  const fs::path ckpt_last = o.output_dir / "last.pt";
  CheckpointMeta meta;
  meta.config_json = config.dump(2);
  if (o.resume) {
    const auto saved = read_checkpoint_meta(ckpt_last);
    check_resumable(nlohmann::json::parse(saved.config_json), config, ckpt_last);
    meta = load_checkpoint(ckpt_last, step);
    meta.config_json = config.dump(2);
    if (main_rank) remove_stale_temporaries(o.output_dir);
    if (main_rank) std::printf("resuming %s at step %lld\n", ckpt_last.c_str(), static_cast<long long>(meta.step));
  } else if (main_rank) {
    fs::create_directories(o.output_dir);
    write_file_atomic(o.output_dir / "config.json", config.dump(2) + "\n");
    if (models::is_scripted_model(o.model)) {
      AtomicPath copy(o.output_dir / kScriptedCopy);
      std::error_code ec;
      fs::copy_file(o.model, copy.temp(), fs::copy_options::overwrite_existing, ec);
      if (ec) throw IoError(copy.final_path().string() + ": cannot copy " + o.model + " there: " + ec.message());
      copy.commit();
    }
    fs::copy_file(o.cache_dir / "plan.json", o.output_dir / "plan.json", fs::copy_options::overwrite_existing);
    data::write_splits_json(o.output_dir / "splits.json", split.folds);
  }
  return meta;
}

// One logging window: its wall seconds, the loader wait in it, samples a step (all ranks) and
// voxels a sample.
struct Window {
  double seconds, wait_seconds, samples_per_step, voxels_per_sample;
};

// The log records of the window's steps (the last ends at `last_step`). Data parallel: the job's
// numbers, i.e. the mean loss over ranks, the slowest rank's time and the largest peaks.
std::vector<StepRecord> window_records(const std::vector<StepOutput>& pending, const std::vector<double>& lrs,
                                       std::int64_t last_step, const Window& w, memory::MemoryProfile profile,
                                       dist::Communicator* comm) {
  const double n = static_cast<double>(pending.size());
  std::vector<double> losses(pending.size());
  for (size_t i = 0; i < pending.size(); ++i) losses[i] = pending[i].loss.item<double>();
  double seconds = w.seconds;
  if (comm) {
    auto t = torch::tensor(losses, torch::kDouble).to(comm->device());
    comm->all_reduce_sum(t).wait();
    t = t.cpu() / static_cast<double>(comm->world_size());
    for (size_t i = 0; i < losses.size(); ++i) losses[i] = t[static_cast<int64_t>(i)].item<double>();
    seconds = comm->max(seconds);
    profile.peak_allocated = static_cast<uint64_t>(comm->max(static_cast<double>(profile.peak_allocated)));
    profile.peak_reserved = static_cast<uint64_t>(comm->max(static_cast<double>(profile.peak_reserved)));
  }
  std::vector<StepRecord> records;
  for (size_t i = 0; i < pending.size(); ++i) {
    StepRecord r;
    r.step = last_step - static_cast<int64_t>(pending.size()) + static_cast<int64_t>(i) + 1;
    r.loss = losses[i];
    r.skipped = pending[i].found_inf.item<float>() != 0.0f;
    r.lr = lrs[i];
    r.step_time_s = seconds / n;
    r.samples_per_s = w.samples_per_step / r.step_time_s;
    r.voxels_per_s = r.samples_per_s * w.voxels_per_sample;
    r.data_wait_s = w.wait_seconds / n;
    r.peak_allocated = profile.peak_allocated;
    r.peak_reserved = profile.peak_reserved;
    records.push_back(r);
  }
  return records;
}

// Data parallel: every rank starts from rank 0's weights (the same seed builds the same ones, but
// a job must never start from two models, buffers included) and syncs its gradients in buckets.
std::unique_ptr<dist::GradientSynchronizer> join_ranks(TrainStep& step, dist::Communicator* comm) {
  if (!comm) return nullptr;
  std::vector<torch::Tensor> state;
  for (const auto& p : step.network().parameters()) state.push_back(p.detach());
  for (const auto& b : step.network().buffers()) state.push_back(b);
  comm->broadcast(state, 0);
  auto sync = std::make_unique<dist::GradientSynchronizer>(step.trainable_parameters(), *comm);
  step.set_gradient_sync(sync.get());
  comm->barrier();  // rank 0 has made the run folder
  return sync;
}

// The run's loader from `first_step` on (batch i is a function of (seed, i): a resumed run sees the
// same data), each rank on its own shard.
data::LoaderOptions loader_options(const TrainOptions& o, const std::vector<std::int64_t>& patch,
                                   std::int64_t first_step, dist::Communicator* comm) {
  data::LoaderOptions lo = o.loader;
  lo.patch = {patch[0], patch[1], patch[2]};
  lo.batch_size = o.batch;
  lo.seed = o.seed;
  lo.first_batch = first_step;
  if (comm) {
    lo.shard = comm->rank();
    lo.shards = comm->world_size();
  }
  return lo;
}

}  // namespace

DiceSummary validate(TrainStep& step, const data::Plan& plan, const std::vector<std::string>& case_ids,
                     const SlidingWindowOptions& sw) {
  step.network().eval();
  std::vector<std::vector<double>> per_case;
  for (const auto& id : case_ids) {
    const auto c = [&] {
      const HostMemoryScope host;  // the case read from the cache is host memory, as on a GPU
      return data::read_case(plan, id);
    }();
    const auto logits = sliding_window_inference_on(
        c.image, step.device(), [&](const torch::Tensor& x) { return step.infer(x); }, sw);
    per_case.push_back(dice_per_class(logits.argmax(0).cpu(), c.label, plan.num_classes()));
  }
  step.network().train();
  return summarize_dice(per_case);
}

namespace {

// validate() as the memory tracker's validation phase; `peak` keeps the largest such phase.
DiceSummary tracked_validation(TrainStep& step, const data::Plan& plan, const std::vector<std::string>& cases,
                               const SlidingWindowOptions& sw, memory::MemoryTracker& tracker, std::uint64_t& peak) {
  DiceSummary dice;
  {
    const auto phase = tracker.phase(memory::Phase::Validation);
    dice = validate(step, plan, cases, sw);
  }
  peak = std::max(peak, tracker.profile().phase(memory::Phase::Validation).allocated);
  return dice;
}

// The options train_model checks before it reads anything.
void check_options(const TrainOptions& o) {
  if (o.steps < 1) throw ConfigError("--steps must be >= 1");
  if (o.batch < 1) throw ConfigError("--batch must be >= 1");
  if (o.log_every < 1) throw ConfigError("--log-every must be >= 1");
  find_loss(o.step.loss.name);  // an unknown loss: ConfigError naming the known ones
}

// What a run is before anything is built: the plan it trains on, the network's context (channels
// and classes from the plan), the split, config.json's content and this process's place in the job.
struct RunSetup {
  data::Plan plan;
  models::ModelContext context;
  data::RunSplit split;
  nlohmann::json config;
  int world = 1;
  bool main_rank = true;
};

// Reads the plan, draws the split and makes config.json's content; refuses a run folder that holds
// a run already unless the run resumes it.
RunSetup describe_run(const TrainOptions& o, dist::Communicator* comm) {
  RunSetup run;
  run.plan = data::load_plan(o.cache_dir);
  run.context = o.model_context;
  run.context.in_channels = run.plan.channels();
  run.context.num_classes = run.plan.num_classes();
  if (run.context.patch.size() != 3) throw ConfigError("--patch: training needs a 3D patch");

  TrainOptions opts = o;
  opts.model_context = run.context;
  run.world = comm ? comm->world_size() : 1;
  run.main_rank = !comm || comm->rank() == 0;
  run.split = data::run_split(run.plan, o.validation_fraction, o.seed, o.fold);
  run.config = config_json(opts, run.plan);
  run.config["split"] = split_json(run.split);
  run.config["world_size"] = run.world;
  run.config["global_batch"] = o.batch * run.world;
  if (!o.resume && fs::exists(o.output_dir / "last.pt"))
    throw ConfigError(o.output_dir.string() + ": holds a run already (last.pt); use --resume or another --output");
  return run;
}

// The training step on the run's network, built from --seed; each rank augments its own samples
// with its own stream. `tracker` sees its phases.
TrainStep build_step(const TrainOptions& o, const models::ModelContext& ctx, dist::Communicator* comm,
                     memory::MemoryTracker& tracker) {
  torch::manual_seed(o.seed);
  StepOptions step_options = o.step;
  if (comm) step_options.seed = o.step.seed + 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(comm->rank());
  return TrainStep(models::make_model(o.model, ctx), o.device, step_options, &tracker);
}

// The loop from the checkpoint's step to the last one, and what it carries from one logging window
// to the next: the steps not yet logged, the window's clock and loader wait, the breakdown of the
// window with the largest peak, the largest validation peak and the summary being built.
class TrainingLoop {
 public:
  // Opens the logs (rank 0) and starts the run's clock and first window.
  TrainingLoop(const TrainOptions& o, const RunSetup& run, TrainStep& step, data::PatchLoader& loader,
               memory::MemoryTracker& tracker, memory::MemoryHistoryRecorder* history, dist::Communicator* comm,
               CheckpointMeta& meta)
      : o_(o), run_(run), step_(step), loader_(loader), tracker_(tracker), history_(history), comm_(comm), meta_(meta) {
    sw_ = o.sliding_window;
    sw_.patch = run.context.patch;
    if (run.main_rank) log_.emplace(o.output_dir, o.steps, o.resume ? meta.step : -1);
    summary_.best_dice = meta.best_dice;
    last_step_ = o.stop_after > 0 ? std::min(o.steps, o.stop_after) : o.steps;
    voxels_ = static_cast<double>(run.context.patch[0] * run.context.patch[1] * run.context.patch[2]);
    window_start_ = Clock::now();
    steady_start_ = window_start_;
    wait_at_window_ = loader.stats().wait_seconds;
    wait_at_start_ = wait_at_window_;
    tracker.reset();
  }

  // Trains up to --steps (or --stop-after); every --log-every steps, and at validations and
  // checkpoints, syncs and logs the window, validates and saves.
  void run() {
    for (int64_t s = meta_.step; s < last_step_; ++s) {
      const double lr = lr_at(s, o_.steps, o_.step.optimizer.lr, o_.schedule);
      const data::Batch batch = loader_.next();
      if (s == meta_.step) {  // the queue's first fill, which no loader speed avoids
        steady_start_ = Clock::now();
        wait_at_steady_ = loader_.stats().wait_seconds;
        summary_.first_batch_wait_s = wait_at_steady_ - wait_at_start_;
      }
      run_step(batch, lr, s);
      pending_lr_.push_back(lr);
      meta_.step = s + 1;
      const bool validate_now =
          (o_.validate_every > 0 && meta_.step % o_.validate_every == 0) || meta_.step == o_.steps;
      const bool checkpoint_now = validate_now || meta_.step == last_step_ ||
                                  (o_.checkpoint_every > 0 && meta_.step % o_.checkpoint_every == 0);
      if (static_cast<int64_t>(pending_.size()) == o_.log_every || checkpoint_now) {
        log_window(batch);
        validate_and_save(validate_now, checkpoint_now);
        start_window();
      }
    }
  }

  // Closes the logs, writes the run's memory breakdown (and the allocator's history) and returns
  // the summary.
  TrainSummary finish() {
    if (log_) log_->finish();
    if (run_.main_rank) write_run_breakdown(o_.output_dir, breakdown_, validation_peak_);
    if (history_ && run_.main_rank) history_->write_snapshot(o_.memory_snapshot);
    const double total = std::chrono::duration<double>(Clock::now() - steady_start_).count();
    summary_.steps_done = meta_.step;
    summary_.world_size = run_.world;
    summary_.median_samples_per_s = median(throughput_);
    summary_.data_wait_share = total > 0 ? (loader_.stats().wait_seconds - wait_at_steady_) / total : 0;
    return summary_;
  }

 private:
  // One step, its output kept until the window is logged; out of memory ends the run with one line
  // that says where (and, with --memory-snapshot, writes the allocator's history up to it).
  void run_step(const data::Batch& batch, double lr, int64_t s) {
    try {
      pending_.push_back(step_.run(batch, lr, s));
    } catch (const std::exception& e) {
      if (!memory::is_oom(e)) throw;
      std::string line = out_of_memory_line(e, tracker_, step_, batch, s + 1);
      if (history_ && run_.main_rank) {
        history_->write_snapshot(o_.memory_snapshot);
        line += "; the allocator's history up to it is in " + o_.memory_snapshot.string();
      } else if (memory::MemoryHistoryRecorder::available()) {
        line += " (--memory-snapshot FILE records the allocator's history up to the failure)";
      }
      throw BudgetError(line);
    }
  }

  // Syncs the device and logs the window's steps (the job's numbers); keeps the breakdown of the
  // window with the largest peak (`batch`: its last).
  void log_window(const data::Batch& batch) {
    sync(o_.device);
    const double seconds = std::chrono::duration<double>(Clock::now() - window_start_).count();
    const double wait = loader_.stats().wait_seconds;
    auto profile = tracker_.profile();
    if (breakdown_.is_null() || profile.peak_allocated > breakdown_.value("peak_allocated", std::uint64_t{0}))
      breakdown_ = step_breakdown(tracker_, step_, batch).to_json();
    const Window window{seconds, wait - wait_at_window_, static_cast<double>(o_.batch * run_.world), voxels_};
    for (const StepRecord& r : window_records(pending_, pending_lr_, meta_.step, window, profile, comm_)) {
      if (log_) log_->step(r);
      summary_.final_loss = r.loss;
      throughput_.push_back(r.samples_per_s);
    }
    summary_.peak_allocated = std::max<uint64_t>(summary_.peak_allocated, profile.peak_allocated);
    summary_.peak_reserved = std::max<uint64_t>(summary_.peak_reserved, profile.peak_reserved);
    pending_.clear();
    pending_lr_.clear();
  }

  // Rank 0 validates (keeping best.pt) and saves last.pt where due; the ranks then agree on the
  // best Dice.
  void validate_and_save(bool validate_now, bool checkpoint_now) {
    if (validate_now && run_.main_rank) {  // the weights are the same on every rank
      const DiceSummary dice =
          tracked_validation(step_, run_.plan, run_.split.validation, sw_, tracker_, validation_peak_);
      const double mean = dice.mean;
      log_->validation(meta_.step, mean, dice.per_class);
      summary_.last_dice_per_class = dice.per_class;
      if (!std::isnan(mean) && mean > meta_.best_dice) {
        meta_.best_dice = mean;
        save_checkpoint(o_.output_dir / "best.pt", step_, meta_);
      }
      summary_.best_dice = meta_.best_dice;
    }
    if (checkpoint_now && run_.main_rank) save_checkpoint(o_.output_dir / "last.pt", step_, meta_);
    if (comm_ && (validate_now || checkpoint_now)) {
      comm_->barrier();
      summary_.best_dice = meta_.best_dice = comm_->max(meta_.best_dice);
    }
  }

  // Starts the next window's peaks, clock and loader wait.
  void start_window() {
    tracker_.reset();
    window_start_ = Clock::now();
    wait_at_window_ = loader_.stats().wait_seconds;
  }

  const TrainOptions& o_;
  const RunSetup& run_;
  TrainStep& step_;
  data::PatchLoader& loader_;
  memory::MemoryTracker& tracker_;
  memory::MemoryHistoryRecorder* history_;
  dist::Communicator* comm_;
  CheckpointMeta& meta_;
  SlidingWindowOptions sw_;
  std::optional<RunLog> log_;
  TrainSummary summary_;
  int64_t last_step_ = 0;
  double voxels_ = 0;
  std::vector<StepOutput> pending_;
  std::vector<double> pending_lr_, throughput_;
  Clock::time_point window_start_, steady_start_;
  double wait_at_window_ = 0, wait_at_start_ = 0, wait_at_steady_ = 0;
  nlohmann::json breakdown_;  // of the window with the largest peak
  std::uint64_t validation_peak_ = 0;
};

}  // namespace

// The run's steps: check the options, describe the run (plan, split, config), build the budget,
// tracker and step, open the run folder (or resume), join the ranks, make the loader, loop, finish.
TrainSummary train_model(const TrainOptions& o, dist::Communicator* comm) {
  check_options(o);
  RunSetup run = describe_run(o, comm);

  memory::ScopedBudget budget(o.budget, o.device);
  memory::MemoryTracker tracker(o.device);
  std::unique_ptr<memory::MemoryHistoryRecorder> history;
  if (!o.memory_snapshot.empty()) history = std::make_unique<memory::MemoryHistoryRecorder>();
  TrainStep step = build_step(o, run.context, comm, tracker);
  tracker.watch_parameters(step.trainable_parameters());
  CheckpointMeta meta = open_run(o, run.config, run.split, step, run.main_rank);
  const auto grad_sync = join_ranks(step, comm);

  if (run.split.validation.empty()) run.split.validation = run.split.train;  // one case: validate on it
  data::PatchLoader loader(o.cache_dir, run.split.train, loader_options(o, run.context.patch, meta.step, comm));
  TrainingLoop loop(o, run, step, loader, tracker, history.get(), comm, meta);
  loop.run();
  return loop.finish();
}

}  // namespace voxfit::train
