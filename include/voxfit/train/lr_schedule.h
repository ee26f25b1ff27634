#pragma once
// Learning-rate schedules as pure functions of the step, so a resumed run needs only the step.
#include <cstdint>
#include <string>

namespace voxfit::train {

enum class ScheduleKind {
  kPoly,      ///< nnU-Net: lr0 * (1 - step/total)^exponent
  kCosine,    ///< linear warm-up over warmup_steps, then cosine decay to 0
  kConstant,  ///< lr0 throughout
};

struct ScheduleOptions {
  ScheduleKind kind = ScheduleKind::kPoly;  ///< `train --schedule auto` picks default_schedule(optimizer)
  double exponent = 0.9;     ///< poly exponent
  int64_t warmup_steps = 0;  ///< cosine only
};

ScheduleKind parse_schedule(const std::string& text);
std::string to_string(ScheduleKind k);

/// The learning rate for `step` (0-based) of `total_steps`.
double lr_at(int64_t step, int64_t total_steps, double base_lr, const ScheduleOptions& o);

}  // namespace voxfit::train
