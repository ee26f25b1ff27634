#include "voxfit/train/step_memory.h"

namespace voxfit::train {

memory::StaticInventory static_inventory(TrainStep& step) {
  memory::StaticInventory inv;
  inv.parameters = memory::bytes_by_dtype(step.network().parameters());
  inv.buffers = memory::bytes_by_dtype(step.network().buffers());
  std::vector<torch::Tensor> state;
  for (const auto& [name, t] : step.optimizer().state()) state.push_back(t);
  inv.optimizer_state = memory::bytes_by_dtype(state);
  inv.loss_scaler = memory::bytes_by_dtype(step.scaler().state());
  return inv;
}

std::uint64_t batch_bytes(const data::Batch& batch) {
  return memory::total_bytes(memory::bytes_by_dtype({batch.image, batch.label}));
}

memory::MemoryBreakdown step_breakdown(const memory::MemoryTracker& tracker, TrainStep& step,
                                       const data::Batch& batch) {
  return memory::make_breakdown(tracker.profile(), static_inventory(step), batch_bytes(batch), batch.image.size(0));
}

}  // namespace voxfit::train
