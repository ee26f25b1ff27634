#pragma once
// Per-probe memory profile of training steps: peaks of forward, backward and optimiser step
// separately, the static part (parameters, gradients, optimiser state), fragmentation, allocator
// retries and OOMs. Reads the CUDA caching allocator's statistics, or the CPU budget's counters.
#include <c10/core/Device.h>
#include <torch/types.h>
#include <nlohmann/json_fwd.hpp>

#include "voxfit/core/block_scope.h"

#include <array>
#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace voxfit::memory {

/// The parts of a training step whose peaks are reported separately.
enum class Phase { Forward, Backward, OptimizerStep, Validation };
inline constexpr std::size_t kPhaseCount = 4;
/// "forward", "backward", "optimizer_step", "validation".
std::string to_string(Phase phase);

/// Highest bytes seen while a phase was open (everything live then, static memory included).
struct PhasePeak {
  std::uint64_t allocated = 0;
  std::uint64_t reserved = 0;  ///< CUDA: held by the caching allocator; CPU: equals allocated
};

/// Memory of the tensors that live across steps (unique storages, views counted once).
struct StaticBytes {
  std::uint64_t parameters = 0;
  std::uint64_t gradients = 0;
  std::uint64_t optimizer_state = 0;
  std::uint64_t total() const { return parameters + gradients + optimizer_state; }
};

/// Bytes per dtype ("float32", "float16", "bfloat16", "int64", ...).
using DtypeBytes = std::map<std::string, std::uint64_t>;
/// The unique storages behind `tensors` (undefined ones skipped), summed per dtype.
DtypeBytes bytes_by_dtype(const std::vector<at::Tensor>& tensors);
std::uint64_t total_bytes(const DtypeBytes& bytes);

/// One top-level block of a training forward (core::BlockScope), measured by the allocator.
struct BlockMemory {
  std::string name;
  /// Live bytes after the block minus before it: what its forward left for backward (saved
  /// tensors and its output); the largest over the steps since reset. Negative if it freed more.
  std::int64_t retained = 0;
  std::uint64_t start = 0;  ///< live bytes when the block began (of the step with the largest retained)
  std::uint64_t peak = 0;   ///< most live bytes while it ran (all steps)
};

struct MemoryProfile {
  std::string device;                    ///< "cpu", "cuda:0"
  std::uint64_t baseline_allocated = 0;  ///< live bytes when the tracker was reset
  std::uint64_t peak_allocated = 0;      ///< since reset, all phases and the time between them
  std::uint64_t peak_reserved = 0;
  /// peak_reserved - peak_allocated: cache held beyond the largest live set (0 on CPU).
  std::uint64_t fragmentation_bytes = 0;
  std::array<PhasePeak, kPhaseCount> phases{};  ///< indexed by Phase; zero for a phase never opened
  StaticBytes static_bytes;
  std::uint64_t alloc_retries = 0;  ///< CUDA: cache flushes and retried cudaMallocs since reset (0 on CPU)
  std::uint64_t ooms = 0;           ///< allocations refused since reset
  /// Top-level blocks of the forward in the order they ran (empty where the network marks none).
  std::vector<BlockMemory> blocks;
  /// Live bytes when the forward began, when it ended and when the optimiser step began (the
  /// largest over the steps since reset; 0 where the phase never began).
  std::uint64_t forward_start = 0, forward_end = 0, optimizer_start = 0;
  /// The phase open when the peak was reached (none: between phases) and, in the forward, the block.
  std::optional<Phase> peak_phase;
  std::string peak_block;
  /// Gradients of the watched parameters when the optimiser step began, per dtype.
  DtypeBytes gradients;

  const PhasePeak& phase(Phase p) const { return phases[static_cast<std::size_t>(p)]; }
  /// {"device", "baseline_allocated", "peak_allocated", ..., "phases": {"forward": {...}, ...}}; bytes.
  nlohmann::json to_json() const;
};

/// Usage by the trainer, per probe:
///   tracker.reset();
///   for each step { { auto s = tracker.phase(Phase::Forward); ... } { auto s = tracker.phase(Phase::Backward); ... }
///                   { auto s = tracker.phase(Phase::OptimizerStep); ... } }
///   tracker.set_static_tensors(params, grads, optimizer_state);
///   MemoryProfile p = tracker.profile();
/// On CPU a ScopedCpuBudget (capped or not) must be alive: its allocator does the counting.
/// Not thread-safe: phases are marked by the training thread.
///
/// While alive the tracker is the process's core::BlockObserver (when no other is installed): the
/// top-level blocks a network marks during the forward phase get their own entries, measured by
/// the allocator around each block (recomputation of checkpointed blocks in backward is not).
class MemoryTracker : public core::BlockObserver {
 public:
  /// Throws Error on CPU without an active ScopedCpuBudget, UnsupportedError for CUDA without CUDA.
  explicit MemoryTracker(const c10::Device& device);
  ~MemoryTracker() override;
  MemoryTracker(const MemoryTracker&) = delete;
  MemoryTracker& operator=(const MemoryTracker&) = delete;

  /// The parameters whose gradients are measured when each optimiser step begins (the only moment
  /// all gradients are live: the optimiser drops them after its step).
  void watch_parameters(std::vector<at::Tensor> parameters) { watched_ = std::move(parameters); }

  void enter_block(const std::string& name) override;
  void leave_block(const std::string& name) override;

  /// Starts a new profile: peaks, phase peaks and static bytes cleared, retries and OOMs counted
  /// from here, baseline = live bytes now.
  void reset();

  /// Opens a phase (closing an open one): peaks seen until end_phase() count for it.
  void begin_phase(Phase phase);
  void end_phase();

  /// Closes its phase when it goes out of scope, also when an OOM unwinds through it; a phase
  /// opened since (the next phase of the step) stays open.
  class PhaseScope {
   public:
    ~PhaseScope();
    PhaseScope(PhaseScope&& other) noexcept;
    PhaseScope(const PhaseScope&) = delete;
    PhaseScope& operator=(const PhaseScope&) = delete;
    PhaseScope& operator=(PhaseScope&&) = delete;

   private:
    friend class MemoryTracker;
    PhaseScope(MemoryTracker* tracker, Phase phase)
        : tracker_(tracker), phase_(phase), uncaught_(std::uncaught_exceptions()) {}
    MemoryTracker* tracker_;
    Phase phase_;
    int uncaught_;  ///< exceptions in flight when it opened: more at its end means one unwinds it
  };
  [[nodiscard]] PhaseScope phase(Phase phase);

  /// The static part, from the tensors themselves (undefined tensors, e.g. gradients before the
  /// first backward, are skipped; storages shared between tensors are counted once per list).
  void set_static_tensors(const std::vector<at::Tensor>& parameters, const std::vector<at::Tensor>& gradients,
                          const std::vector<at::Tensor>& optimizer_state);

  /// The profile so far (the peak since the last phase boundary included).
  MemoryProfile profile() const;

  /// Where an exception (an out-of-memory error) left the step since reset(): the phase its
  /// unwinding closed and, in the forward, the top-level block. Unset while nothing failed.
  struct Failure {
    Phase phase = Phase::Forward;
    std::string block;  ///< empty outside a marked block
  };
  const std::optional<Failure>& failure() const { return failure_; }

  const c10::Device& device() const { return device_; }

 private:
  struct Reading {
    std::uint64_t allocated = 0, allocated_peak = 0, reserved_peak = 0, retries = 0, ooms = 0;
  };
  Reading read() const;
  void restart_device_peak();
  /// Folds the device's peak since its last restart into the profile, the open phase and the
  /// open block, then restarts it: every boundary (phase or block) calls this.
  Reading fold_and_restart();

  c10::Device device_;
  MemoryProfile profile_;
  Reading at_reset_;
  std::optional<Phase> open_;
  std::vector<at::Tensor> watched_;
  bool observing_ = false;  ///< installed as the block observer
  int block_depth_ = 0;
  std::string open_block_;
  std::uint64_t block_start_ = 0, block_peak_ = 0;
  std::optional<Failure> failure_;
  std::string unwound_block_;  ///< the block an exception left, until its phase's scope closes
};

/// Bytes of the unique storages behind `tensors` (undefined ones skipped).
std::uint64_t storage_bytes(const std::vector<at::Tensor>& tensors);

}  // namespace voxfit::memory
