#include "voxfit/train/run_log.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/error.h"
#include "voxfit/core/units.h"

namespace voxfit::train {

namespace fs = std::filesystem;

namespace {

// Keeps the lines of a log whose step is at most `last` (and any line without one), rewriting
// the file atomically; `step_of` reads a line's step.
void keep_through(const fs::path& file, std::int64_t last,
                  const std::function<std::optional<std::int64_t>(const std::string&)>& step_of) {
  if (!fs::exists(file)) return;
  std::ifstream in(file);
  std::string kept, line;
  while (std::getline(in, line)) {
    const auto step = step_of(line);
    if (!step || *step <= last) kept += line + "\n";
  }
  write_file_atomic(file, kept);
}

}  // namespace

RunLog::RunLog(const fs::path& dir, std::int64_t total_steps, std::int64_t resume_step)
    : total_(total_steps), tty_(::isatty(STDOUT_FILENO) == 1) {
  fs::create_directories(dir);
  const bool append = resume_step >= 0;
  if (append) {
    keep_through(dir / "log.jsonl", resume_step, [](const std::string& l) -> std::optional<std::int64_t> {
      const auto j = nlohmann::json::parse(l, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) return std::nullopt;
      return j["step"].get<std::int64_t>();
    });
    keep_through(dir / "log.csv", resume_step, [](const std::string& l) -> std::optional<std::int64_t> {
      char* end = nullptr;
      const long long step = std::strtoll(l.c_str(), &end, 10);
      if (end == l.c_str() || *end != ',') return std::nullopt;  // the header
      return step;
    });
  }
  const auto mode = append ? std::ios::app : std::ios::trunc;
  const bool csv_exists = append && fs::exists(dir / "log.csv");
  jsonl_.open(dir / "log.jsonl", std::ios::out | mode);
  csv_.open(dir / "log.csv", std::ios::out | mode);
  if (!jsonl_ || !csv_) throw IoError((dir / "log.jsonl").string() + ": cannot open the run log");
  csv_rows_.emplace(csv_,
                    std::vector<std::string>{"step", "loss", "lr", "samples_per_s", "voxels_per_s", "step_time_s",
                                             "data_wait_s", "peak_allocated_bytes", "peak_reserved_bytes", "skipped"},
                    /*write_header=*/!csv_exists);
  events_ = std::make_unique<EventWriter>(dir / "tensorboard");
}

RunLog::~RunLog() = default;

void RunLog::step(const StepRecord& r) {
  nlohmann::json j{{"step", r.step},
                   {"loss", r.loss},
                   {"lr", r.lr},
                   {"samples_per_s", r.samples_per_s},
                   {"voxels_per_s", r.voxels_per_s},
                   {"step_time_s", r.step_time_s},
                   {"data_wait_s", r.data_wait_s},
                   {"peak_allocated_bytes", r.peak_allocated},
                   {"peak_reserved_bytes", r.peak_reserved},
                   {"skipped", r.skipped}};
  jsonl_ << j.dump() << "\n";
  csv_rows_->row({r.step, r.loss, r.lr, r.samples_per_s, r.voxels_per_s, r.step_time_s, r.data_wait_s, r.peak_allocated,
                  r.peak_reserved, r.skipped ? 1 : 0});
  events_->add_scalar("train/loss", r.loss, r.step);
  events_->add_scalar("train/lr", r.lr, r.step);
  events_->add_scalar("train/samples_per_s", r.samples_per_s, r.step);
  events_->add_scalar("memory/peak_allocated_gib", to_gib(r.peak_allocated), r.step);
  // Whole lines reach the file at once, so a killed run leaves no torn line for --resume to append to.
  jsonl_.flush();
  csv_.flush();
  if (!jsonl_ || !csv_) throw IoError("run log: write failed (disk full?)");

  char line[240];
  const double eta = static_cast<double>(std::max<std::int64_t>(0, total_ - r.step)) * r.step_time_s;
  std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  lr %.2e  %.2f samples/s  wait %.0f%%  peak %s  ETA %s",
                static_cast<long long>(r.step), static_cast<long long>(total_), r.loss, r.lr, r.samples_per_s,
                r.step_time_s > 0 ? 100.0 * r.data_wait_s / r.step_time_s : 0.0, format_bytes(r.peak_allocated).c_str(),
                format_duration(eta).c_str());
  if (tty_) {
    const int width = 24;
    const int done =
        static_cast<int>(std::lround(width * static_cast<double>(r.step) / std::max<std::int64_t>(1, total_)));
    std::printf("\r[%s%s] %s\033[K", std::string(done, '#').c_str(), std::string(width - done, '.').c_str(), line);
  } else {
    std::printf("%s\n", line);
  }
  std::fflush(stdout);
}

void RunLog::validation(std::int64_t step, double mean_dice, const std::vector<double>& per_class) {
  nlohmann::json pc = nlohmann::json::array();
  for (double d : per_class) pc.push_back(std::isnan(d) ? nlohmann::json(nullptr) : nlohmann::json(d));
  jsonl_ << nlohmann::json{{"step", step}, {"val_mean_dice", mean_dice}, {"val_dice_per_class", pc}}.dump() << "\n";
  jsonl_.flush();
  events_->add_scalar("val/mean_dice", mean_dice, step);
  std::printf("%sstep %lld: validation mean Dice %.4f\n", tty_ ? "\n" : "", static_cast<long long>(step), mean_dice);
  std::fflush(stdout);
}

void RunLog::finish() {
  if (tty_) std::printf("\n");
  jsonl_.flush();
  csv_.flush();
  events_->flush();
}

}  // namespace voxfit::train
