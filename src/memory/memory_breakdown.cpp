#include "voxfit/memory/memory_breakdown.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>

#include "voxfit/memory/budget.h"

namespace voxfit::memory {

namespace {

std::int64_t as_signed(std::uint64_t v) { return static_cast<std::int64_t>(v); }

// The activation parts and the live bytes the peak's phase (or forward block) started from.
struct Activations {
  std::vector<BreakdownPart> parts;
  std::int64_t base = 0;  ///< live bytes the workspace is counted from
};

Activations activations_at_peak(const MemoryProfile& p) {
  Activations a;
  const auto f0 = as_signed(p.forward_start), f1 = as_signed(p.forward_end);
  std::int64_t in_blocks = 0;
  const auto add_blocks = [&](std::size_t count) {
    for (std::size_t i = 0; i < count && i < p.blocks.size(); ++i) {
      a.parts.push_back({p.blocks[i].name, "activations", p.blocks[i].retained});
      in_blocks += p.blocks[i].retained;
    }
  };
  const Phase phase = p.peak_phase.value_or(Phase::Validation);
  if (phase == Phase::Forward && !p.peak_block.empty()) {
    const auto it =
        std::find_if(p.blocks.begin(), p.blocks.end(), [&](const BlockMemory& b) { return b.name == p.peak_block; });
    add_blocks(static_cast<std::size_t>(it - p.blocks.begin()));
    a.base = it == p.blocks.end() ? f1 : as_signed(it->start);
  } else if (phase == Phase::Forward || phase == Phase::Backward) {
    add_blocks(p.blocks.size());
    a.base = f1;
  } else if (phase == Phase::OptimizerStep) {
    const auto gradients = as_signed(total_bytes(p.gradients));
    a.parts.push_back({"gradients", "gradients", gradients});
    in_blocks += gradients;
    a.base = as_signed(p.optimizer_start);
  } else {  // validation or between phases: counted from the start of a step
    a.base = f0;
  }
  // What the forward left live outside the blocks (loss, the heads' outputs) up to the base.
  a.parts.push_back({"other activations", "activations", a.base - f0 - in_blocks});
  return a;
}

}  // namespace

std::uint64_t StaticInventory::total() const {
  return total_bytes(parameters) + total_bytes(optimizer_state) + total_bytes(buffers) + total_bytes(loss_scaler);
}

std::int64_t MemoryBreakdown::part_bytes(const std::string& group) const {
  std::int64_t n = 0;
  for (const auto& p : parts)
    if (p.group == group) n += p.bytes;
  return n;
}

double MemoryBreakdown::unattributed_share() const {
  return peak_allocated == 0
             ? 0.0
             : static_cast<double>(std::llabs(part_bytes("unattributed"))) / static_cast<double>(peak_allocated);
}

MemoryBreakdown make_breakdown(const MemoryProfile& p, const StaticInventory& statics, std::uint64_t batch_bytes,
                               std::int64_t batch) {
  MemoryBreakdown b;
  b.device = p.device;
  b.batch = batch;
  b.peak_allocated = p.peak_allocated;
  b.peak_reserved = p.peak_reserved;
  b.peak_phase = p.peak_phase ? to_string(*p.peak_phase) : "between phases";
  b.peak_block = p.peak_block;
  b.statics = statics;
  b.gradients = p.gradients;
  b.phases = p.phases;
  b.parts = {{"parameters", "static", as_signed(total_bytes(statics.parameters))},
             {"optimizer state", "static", as_signed(total_bytes(statics.optimizer_state))},
             {"buffers", "static", as_signed(total_bytes(statics.buffers))},
             {"loss scaler", "static", as_signed(total_bytes(statics.loss_scaler))},
             {"batch", "inputs", as_signed(batch_bytes)},
             {"unattributed", "unattributed",
              as_signed(p.forward_start) - as_signed(statics.total()) - as_signed(batch_bytes)}};
  const Activations a = activations_at_peak(p);
  b.parts.insert(b.parts.end(), a.parts.begin(), a.parts.end());
  b.parts.push_back({"workspace", "workspace", as_signed(p.peak_allocated) - a.base});
  b.fragmentation = p.fragmentation_bytes;
  if (const auto report = active_budget_report()) {
    b.cuda_context = report->overhead_bytes;
    b.usable = report->usable_bytes;
    b.headroom = b.usable > b.peak_reserved ? b.usable - b.peak_reserved : 0;
  }
  return b;
}

nlohmann::json MemoryBreakdown::to_json() const {
  nlohmann::json parts_json = nlohmann::json::array();
  std::int64_t sum = 0;
  for (const auto& p : parts) {
    parts_json.push_back({{"name", p.name}, {"group", p.group}, {"bytes", p.bytes}});
    sum += p.bytes;
  }
  nlohmann::json phases_json = nlohmann::json::object();
  for (std::size_t i = 0; i < kPhaseCount; ++i) phases_json[to_string(static_cast<Phase>(i))] = phases[i].allocated;
  return {{"device", device},
          {"batch", batch},
          {"peak_allocated", peak_allocated},
          {"peak_reserved", peak_reserved},
          {"peak_phase", peak_phase},
          {"peak_block", peak_block},
          {"static",
           {{"parameters", statics.parameters},
            {"optimizer_state", statics.optimizer_state},
            {"buffers", statics.buffers},
            {"loss_scaler", statics.loss_scaler}}},
          {"gradients", gradients},
          {"parts", parts_json},
          {"sum_of_parts", sum},
          {"unattributed_share", unattributed_share()},
          {"phase_peaks_allocated", phases_json},
          {"fragmentation", fragmentation},
          {"largest_free_block", largest_free_block ? nlohmann::json(*largest_free_block) : nlohmann::json()},
          {"cuda_context", cuda_context},
          {"usable", usable},
          {"headroom", headroom}};
}

std::vector<std::pair<std::string, double>> bar_segments(const nlohmann::json& breakdown) {
  std::vector<std::pair<std::string, double>> out;
  double statics = 0;
  for (const auto& p : breakdown.at("parts"))
    if (p.at("group") == "static") statics += p.at("bytes").get<double>();
  out.emplace_back("static", statics);
  for (const auto& p : breakdown.at("parts"))
    if (p.at("group") != "static")
      out.emplace_back(p.at("name").get<std::string>(), std::max(0.0, p.at("bytes").get<double>()));
  out.emplace_back("fragmentation", breakdown.value("fragmentation", 0.0));
  out.emplace_back("headroom", breakdown.value("headroom", 0.0));
  return out;
}

}  // namespace voxfit::memory
