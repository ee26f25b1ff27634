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
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::OptimizerStep: return "optimizer_step";
  }
  return "unknown";
}

nlohmann::json MemoryProfile::to_json() const {
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
          {"ooms", ooms}};
}

std::uint64_t storage_bytes(const std::vector<at::Tensor>& tensors) {
  std::unordered_set<const void*> seen;
  std::uint64_t total = 0;
  for (const auto& t : tensors) {
    if (!t.defined() || !t.has_storage()) continue;
    const auto& storage = t.storage();
    if (seen.insert(storage.unsafeGetStorageImpl()).second) total += storage.nbytes();
  }
  return total;
}

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

void MemoryTracker::fold_peak(const Reading& r) {
  profile_.peak_allocated = std::max(profile_.peak_allocated, r.allocated_peak);
  profile_.peak_reserved = std::max(profile_.peak_reserved, r.reserved_peak);
}

void MemoryTracker::reset() {
  open_.reset();
  restart_device_peak();
  at_reset_ = read();
  const std::string device = profile_.device;
  profile_ = MemoryProfile{};
  profile_.device = device;
  profile_.baseline_allocated = at_reset_.allocated;
}

void MemoryTracker::begin_phase(Phase phase) {
  if (open_) end_phase();
  // The device keeps one peak; fold it into the profile before restarting it for this phase.
  fold_peak(read());
  restart_device_peak();
  open_ = phase;
}

void MemoryTracker::end_phase() {
  if (!open_) return;
  const Reading r = read();
  fold_peak(r);
  PhasePeak& p = profile_.phases[static_cast<std::size_t>(*open_)];
  p.allocated = std::max(p.allocated, r.allocated_peak);
  p.reserved = std::max(p.reserved, r.reserved_peak);
  restart_device_peak();
  open_.reset();
}

MemoryTracker::PhaseScope::~PhaseScope() {
  if (tracker_ != nullptr) tracker_->end_phase();
}

MemoryTracker::PhaseScope::PhaseScope(PhaseScope&& other) noexcept : tracker_(other.tracker_) {
  other.tracker_ = nullptr;
}

MemoryTracker::PhaseScope MemoryTracker::phase(Phase phase) {
  begin_phase(phase);
  return PhaseScope(this);
}

void MemoryTracker::set_static_tensors(const std::vector<at::Tensor>& parameters,
                                       const std::vector<at::Tensor>& gradients,
                                       const std::vector<at::Tensor>& optimizer_state) {
  profile_.static_bytes = {storage_bytes(parameters), storage_bytes(gradients), storage_bytes(optimizer_state)};
}

MemoryProfile MemoryTracker::profile() const {
  MemoryProfile out = profile_;
  const Reading r = read();
  out.peak_allocated = std::max(out.peak_allocated, r.allocated_peak);
  out.peak_reserved = std::max(out.peak_reserved, r.reserved_peak);
  out.fragmentation_bytes = out.peak_reserved > out.peak_allocated ? out.peak_reserved - out.peak_allocated : 0;
  out.alloc_retries = r.retries - std::min(r.retries, at_reset_.retries);
  out.ooms = r.ooms - std::min(r.ooms, at_reset_.ooms);
  return out;
}

}  // namespace voxfit::memory
