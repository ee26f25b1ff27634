#include "voxfit/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "voxfit/core/error.h"

namespace voxfit::train {

ScheduleKind parse_schedule(const std::string& text) {
  if (text == "poly") return ScheduleKind::kPoly;
  if (text == "cosine") return ScheduleKind::kCosine;
  if (text == "constant") return ScheduleKind::kConstant;
  throw ConfigError("--schedule: '" + text + "' is not one of auto, poly, cosine, constant");
}

std::string to_string(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::kPoly:
      return "poly";
    case ScheduleKind::kCosine:
      return "cosine";
    case ScheduleKind::kConstant:
      return "constant";
  }
  return "?";
}

double lr_at(int64_t step, int64_t total_steps, double base_lr, const ScheduleOptions& o) {
  const double total = static_cast<double>(std::max<int64_t>(total_steps, 1));
  const double s = static_cast<double>(std::clamp<int64_t>(step, 0, total_steps));
  switch (o.kind) {
    case ScheduleKind::kConstant:
      return base_lr;
    case ScheduleKind::kPoly:
      return base_lr * std::pow(1.0 - s / total, o.exponent);
    case ScheduleKind::kCosine: {
      if (step < o.warmup_steps) return base_lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
      const double span = std::max(1.0, total - static_cast<double>(o.warmup_steps));
      const double progress = (s - static_cast<double>(o.warmup_steps)) / span;
      return 0.5 * base_lr * (1.0 + std::cos(M_PI * std::clamp(progress, 0.0, 1.0)));
    }
  }
  return base_lr;
}

}  // namespace voxfit::train
