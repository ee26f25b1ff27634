#pragma once
// Where a training step's peak memory goes: the tracker's allocator readings (per-phase peaks,
// live bytes at phase and block boundaries, per-block retained bytes) combined with the tensors
// themselves (parameters, optimiser state, buffers, loss scaler, gradients, the batch), as parts
// that add up to the measured peak, plus what lies beyond it (fragmentation, the CUDA context,
// the budget left unused).
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "voxfit/memory/memory_tracker.h"

namespace voxfit::memory {

/// The tensors that live across steps, per dtype (unique storages).
struct StaticInventory {
  DtypeBytes parameters, optimizer_state, buffers, loss_scaler;
  std::uint64_t total() const;
};

/// One part of the peak. Groups: "static", "inputs", "activations", "workspace", "unattributed".
struct BreakdownPart {
  std::string name;  ///< "parameters", "batch", "encoder0", "other activations", ...
  std::string group;
  std::int64_t bytes = 0;
};

/// The peak, split by what was live when it happened. How each part is measured:
/// - static: storage bytes of the parameters, optimiser state, buffers and loss-scaler state;
/// - batch: storage bytes of the step's device batch (image + label);
/// - activations, per top-level block: live bytes after the block minus before it in the forward
///   (the allocator), for the blocks that had run when the peak came (all of them for a peak in
///   backward); "other activations": what the forward left live outside the blocks (loss, heads);
/// - workspace: the peak minus the live bytes when the peak's phase (backward, optimiser step) or
///   forward block began: temporaries, library workspaces, and in backward the gradients made so
///   far net of the activations already freed;
/// - unattributed: live bytes when the forward began minus static and batch: what the tensor
///   counts miss (allocator rounding, leftovers). Its share of the peak says how closely the
///   parts add up.
struct MemoryBreakdown {
  std::string device;
  std::int64_t batch = 0;
  std::uint64_t peak_allocated = 0, peak_reserved = 0;
  std::string peak_phase;  ///< "forward", "backward", "optimizer_step", "validation", "between phases"
  std::string peak_block;  ///< the forward block holding the peak (forward peaks only)
  StaticInventory statics;
  DtypeBytes gradients;              ///< all of them, as live when the optimiser step began
  std::vector<BreakdownPart> parts;  ///< sum == peak_allocated
  std::array<PhasePeak, kPhaseCount> phases{};
  /// Beyond the live bytes: reserved - allocated at the peak (0 on CPU), the largest free block of
  /// the allocator's cache where it tells (CUDA), the CUDA context of the budget (0 on CPU) and
  /// usable - peak reserved (0 without a cap).
  std::uint64_t fragmentation = 0;
  std::optional<std::uint64_t> largest_free_block;
  std::uint64_t cuda_context = 0, usable = 0, headroom = 0;

  std::int64_t part_bytes(const std::string& group) const;
  /// |unattributed| / peak.
  double unattributed_share() const;
  nlohmann::json to_json() const;
};

/// The breakdown of `profile` (a tracker's, with blocks and boundaries) for a step at `batch` whose
/// device batch held `batch_bytes`; usable bytes and the CUDA context from active_budget_report().
MemoryBreakdown make_breakdown(const MemoryProfile& profile, const StaticInventory& statics, std::uint64_t batch_bytes,
                               std::int64_t batch);

/// The stacked-bar segments of a breakdown's JSON (to_json()): static, batch, each activation part,
/// workspace, unattributed, fragmentation, headroom; {name, bytes}, bytes >= 0.
std::vector<std::pair<std::string, double>> bar_segments(const nlohmann::json& breakdown);

}  // namespace voxfit::memory
