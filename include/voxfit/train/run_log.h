#pragma once
// What a training run reports as it goes: one JSON line and one CSV row per step (log.jsonl,
// log.csv), TensorBoard scalars (tensorboard/), and a progress bar on a terminal (plain lines when
// stdout is not one).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "voxfit/core/csv.h"
#include "voxfit/train/event_writer.h"

namespace voxfit::train {

struct StepRecord {
  std::int64_t step = 0;  ///< 1-based: optimiser steps done
  double loss = 0;
  double lr = 0;
  double samples_per_s = 0;
  double voxels_per_s = 0;
  double step_time_s = 0;            ///< wall time per step (averaged over the steps since the last sync)
  double data_wait_s = 0;            ///< time per step the loop waited for the loader
  std::uint64_t peak_allocated = 0;  ///< bytes, over the steps since the last sync
  std::uint64_t peak_reserved = 0;
  bool skipped = false;  ///< fp16 overflow: the optimiser step was skipped
};

class RunLog {
 public:
  /// Opens the logs in `dir`. Resuming from the checkpoint of step `resume_step` (>= 0) keeps the
  /// entries up to that step and appends after them: steps a killed run logged past its last
  /// checkpoint run again, and are logged once. A negative `resume_step` starts new logs.
  RunLog(const std::filesystem::path& dir, std::int64_t total_steps, std::int64_t resume_step = -1);
  ~RunLog();
  void step(const StepRecord& r);
  void validation(std::int64_t step, double mean_dice, const std::vector<double>& per_class);
  /// Ends the progress bar's line and flushes everything.
  void finish();

 private:
  std::ofstream jsonl_, csv_;
  std::optional<CsvWriter> csv_rows_;  ///< log.csv's rows, written to csv_
  std::unique_ptr<EventWriter> events_;
  std::int64_t total_;
  bool tty_;
};

}  // namespace voxfit::train
