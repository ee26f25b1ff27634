#pragma once
// What a training step holds across steps, and its batch, as the memory breakdown counts them.
#include <cstdint>

#include "voxfit/data/patch_loader.h"
#include "voxfit/memory/memory_breakdown.h"
#include "voxfit/train/train_step.h"

namespace voxfit::train {

/// Parameters, optimiser state, buffers (norm statistics) and loss-scaler state of `step`, per dtype.
memory::StaticInventory static_inventory(TrainStep& step);

/// Bytes of the batch as the step holds it on its device (image + label, same dtypes as the loader's).
std::uint64_t batch_bytes(const data::Batch& batch);

/// The breakdown of `tracker`'s profile for steps of `step` on batches like `batch`.
memory::MemoryBreakdown step_breakdown(const memory::MemoryTracker& tracker, TrainStep& step,
                                       const data::Batch& batch);

}  // namespace voxfit::train
