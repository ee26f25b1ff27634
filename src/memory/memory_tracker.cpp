#include "voxfit/memory/memory_tracker.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <unordered_set>

#include "voxfit/core/error.h"
#include "voxfit/core/torch_compat.h"
#include "voxfit/memory/cpu_budget.h"

namespace voxfit::memory {

std::string to_string(Phase phase) {
  switch (phase) {
    case Phase::Forward:
      return "forward";
    case Phase::Backward:
      return "backward";
    case Phase::OptimizerStep:
      return "optimizer_step";
    case Phase::Validation:
      return "validation";
  }
  return "unknown";
}

nlohmann::json MemoryProfile::to_json() const {
  nlohmann::json blocks_json = nlohmann::json::array();
  for (const auto& b : blocks)
    blocks_json.push_back({{"name", b.name}, {"retained", b.retained}, {"start", b.start}, {"peak", b.peak}});
  nlohmann::json phases_json = nlohmann::json::object();
  for (std::size_t i = 0; i < kPhaseCount; ++i)
    phases_json[to_string(static_cast<Phase>(i))] = {{"peak_allocated", phases[i].allocated},
                                                     {"peak_reserved", phases[i].reserved}};
  return {{"device", device},
          {"baseline_allocated", baseline_allocated},
          {"peak_allocated", peak_allocated},
          {"peak_reserved", peak_reserved},
          {"fragmentation_bytes", fragmentation_bytes},
          {"static_bytes",
           {{"parameters", static_bytes.parameters},
            {"gradients", static_bytes.gradients},
            {"optimizer_state", static_bytes.optimizer_state},
            {"total", static_bytes.total()}}},
          {"phases", phases_json},
          {"alloc_retries", alloc_retries},
          {"ooms", ooms},
          {"blocks", blocks_json},
          {"forward_start", forward_start},
          {"forward_end", forward_end},
          {"optimizer_start", optimizer_start},
          {"peak_phase", peak_phase ? to_string(*peak_phase) : std::string("between phases")},
          {"peak_block", peak_block},
          {"gradients", gradients}};
}

namespace {

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "float32";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kDouble:
      return "float64";
    case at::kLong:
      return "int64";
    case at::kInt:
      return "int32";
    case at::kBool:
      return "bool";
    case at::kByte:
      return "uint8";
    default:
      return c10::toString(t);
  }
}

}  // namespace

DtypeBytes bytes_by_dtype(const std::vector<at::Tensor>& tensors) {
  std::unordered_set<const void*> seen;
  DtypeBytes out;
  for (const auto& t : tensors) {
    if (!t.defined() || !t.has_storage()) continue;
    const auto& storage = t.storage();
    if (seen.insert(storage.unsafeGetStorageImpl()).second) out[dtype_name(t.scalar_type())] += storage.nbytes();
  }
  return out;
}

std::uint64_t total_bytes(const DtypeBytes& bytes) {
  std::uint64_t n = 0;
  for (const auto& [dtype, b] : bytes) n += b;
  return n;
}

std::uint64_t storage_bytes(const std::vector<at::Tensor>& tensors) { return total_bytes(bytes_by_dtype(tensors)); }

MemoryTracker::MemoryTracker(const c10::Device& device) : device_(device) {
  if (device_.is_cuda()) {
#if !defined(VOXFIT_WITH_CUDA)
    throw UnsupportedError("memory tracking on " + device_.str() + ": this build has no CUDA");
#endif
  } else if (!active_cpu_budget_stats()) {
    throw Error("CPU memory tracking needs an active CPU budget (ScopedCpuBudget, capped or not) to count allocations");
  }
  profile_.device = device_.str();
  reset();
  if (core::block_observer() == nullptr) {
    core::set_block_observer(this);
    observing_ = true;
  }
}

MemoryTracker::~MemoryTracker() {
  if (observing_) core::set_block_observer(nullptr);
}

MemoryTracker::Reading MemoryTracker::read() const {
  Reading r;
  if (device_.is_cuda()) {
#if defined(VOXFIT_WITH_CUDA)
    const auto stats = compat::device_stats(device_.has_index() ? device_.index() : 0);
    // Index 0 of a StatArray is StatType::AGGREGATE (all pools) in 1.13 and 2.x.
    r.allocated = static_cast<std::uint64_t>(stats.allocated_bytes[0].current);
    r.allocated_peak = static_cast<std::uint64_t>(stats.allocated_bytes[0].peak);
    r.reserved_peak = static_cast<std::uint64_t>(stats.reserved_bytes[0].peak);
    r.retries = static_cast<std::uint64_t>(stats.num_alloc_retries);
    r.ooms = static_cast<std::uint64_t>(stats.num_ooms);
#endif
    return r;
  }
  if (const auto stats = active_cpu_budget_stats()) {
    r.allocated = stats->current_bytes;
    r.allocated_peak = stats->peak_bytes;
    r.reserved_peak = stats->peak_bytes;
    r.ooms = stats->ooms;
  }
  return r;
}

void MemoryTracker::restart_device_peak() {
  if (device_.is_cuda()) {
#if defined(VOXFIT_WITH_CUDA)
    compat::reset_peak_stats(device_.has_index() ? device_.index() : 0);
#endif
    return;
  }
  reset_cpu_budget_peak();
}

MemoryTracker::Reading MemoryTracker::fold_and_restart() {
  const Reading r = read();
  if (r.allocated_peak > profile_.peak_allocated) {
    profile_.peak_phase = open_;
    profile_.peak_block = block_depth_ > 0 ? open_block_ : std::string();
  }
  profile_.peak_allocated = std::max(profile_.peak_allocated, r.allocated_peak);
  profile_.peak_reserved = std::max(profile_.peak_reserved, r.reserved_peak);
  if (open_) {
    PhasePeak& p = profile_.phases[static_cast<std::size_t>(*open_)];
    p.allocated = std::max(p.allocated, r.allocated_peak);
    p.reserved = std::max(p.reserved, r.reserved_peak);
  }
  block_peak_ = std::max(block_peak_, r.allocated_peak);
  restart_device_peak();
  return r;
}

void MemoryTracker::reset() {
  open_.reset();
  block_depth_ = 0;
  restart_device_peak();
  at_reset_ = read();
  const std::string device = profile_.device;
  profile_ = MemoryProfile{};
  profile_.device = device;
  failure_.reset();
  unwound_block_.clear();
  profile_.baseline_allocated = at_reset_.allocated;
}

void MemoryTracker::begin_phase(Phase phase) {
  if (open_) end_phase();
  // The device keeps one peak; fold it into the profile before restarting it for this phase.
  const Reading r = fold_and_restart();
  if (phase == Phase::Forward) profile_.forward_start = std::max(profile_.forward_start, r.allocated);
  if (phase == Phase::OptimizerStep) {
    profile_.optimizer_start = std::max(profile_.optimizer_start, r.allocated);
    std::vector<at::Tensor> grads;
    for (const auto& p : watched_) grads.push_back(p.grad());
    if (!watched_.empty()) profile_.gradients = bytes_by_dtype(grads);
  }
  open_ = phase;
  block_depth_ = 0;
}

void MemoryTracker::end_phase() {
  if (!open_) return;
  const Reading r = fold_and_restart();
  if (*open_ == Phase::Forward) profile_.forward_end = std::max(profile_.forward_end, r.allocated);
  open_.reset();
}

void MemoryTracker::enter_block(const std::string& name) {
  if (open_ != Phase::Forward || block_depth_++ > 0) return;
  block_start_ = fold_and_restart().allocated;
  block_peak_ = block_start_;
  open_block_ = name;
}

void MemoryTracker::leave_block(const std::string& name) {
  if (open_ != Phase::Forward || block_depth_ == 0) return;
  if (block_depth_ > 1) {
    --block_depth_;
    return;
  }
  const Reading r = fold_and_restart();  // still inside the block: a peak here is the block's
  block_depth_ = 0;
  if (std::uncaught_exceptions() > 0 && !failure_) unwound_block_ = name;
  const auto retained = static_cast<std::int64_t>(r.allocated) - static_cast<std::int64_t>(block_start_);
  auto it = std::find_if(profile_.blocks.begin(), profile_.blocks.end(),
                         [&](const BlockMemory& b) { return b.name == name; });
  if (it == profile_.blocks.end())
    it = profile_.blocks.insert(profile_.blocks.end(), BlockMemory{name, retained, block_start_, 0});
  if (retained > it->retained) {
    it->retained = retained;
    it->start = block_start_;
  }
  it->peak = std::max(it->peak, block_peak_);
  open_block_.clear();
}

MemoryTracker::PhaseScope::~PhaseScope() {
  // Only its own phase: `scope.emplace(tracker.phase(next))` opens the next phase before the old
  // scope is destroyed, and must not see it closed again at once.
  if (tracker_ == nullptr) return;
  if (std::uncaught_exceptions() > uncaught_ && !tracker_->failure_)
    tracker_->failure_ = Failure{phase_, phase_ == Phase::Forward ? tracker_->unwound_block_ : std::string()};
  if (tracker_->open_ == phase_) tracker_->end_phase();
}

MemoryTracker::PhaseScope::PhaseScope(PhaseScope&& other) noexcept
    : tracker_(other.tracker_), phase_(other.phase_), uncaught_(other.uncaught_) {
  other.tracker_ = nullptr;
}

MemoryTracker::PhaseScope MemoryTracker::phase(Phase phase) {
  begin_phase(phase);
  return PhaseScope(this, phase);
}

void MemoryTracker::set_static_tensors(const std::vector<at::Tensor>& parameters,
                                       const std::vector<at::Tensor>& gradients,
                                       const std::vector<at::Tensor>& optimizer_state) {
  profile_.static_bytes = {storage_bytes(parameters), storage_bytes(gradients), storage_bytes(optimizer_state)};
}

MemoryProfile MemoryTracker::profile() const {
  MemoryProfile out = profile_;
  const Reading r = read();
  if (r.allocated_peak > out.peak_allocated) out.peak_phase = open_;
  out.peak_allocated = std::max(out.peak_allocated, r.allocated_peak);
  out.peak_reserved = std::max(out.peak_reserved, r.reserved_peak);
  out.fragmentation_bytes = out.peak_reserved > out.peak_allocated ? out.peak_reserved - out.peak_allocated : 0;
  out.alloc_retries = r.retries - std::min(r.retries, at_reset_.retries);
  out.ooms = r.ooms - std::min(r.ooms, at_reset_.ooms);
  return out;
}

}  // namespace voxfit::memory
