#pragma once
// Checkpoints: everything a run needs to continue exactly where it stopped (model, optimiser,
// loss scaler, step, RNG states, best validation Dice, the full config), written atomically.
#include <filesystem>
#include <string>

#include "voxfit/train/train_step.h"

namespace voxfit::train {

struct CheckpointMeta {
  std::int64_t step = 0;    ///< optimiser steps done
  double best_dice = -1.0;  ///< best validation mean Dice so far (-1: none yet)
  std::string config_json;  ///< the run's resolved configuration
};

/// Writes `path` atomically (temp file + rename): a crash mid-write leaves the previous file.
void save_checkpoint(const std::filesystem::path& path, TrainStep& step, const CheckpointMeta& meta);

/// Reads only the metadata (config, step) — for predict and for checking a resume.
CheckpointMeta read_checkpoint_meta(const std::filesystem::path& path);

/// Restores model, optimiser, scaler and RNG states into `step`; throws IoError naming the file if
/// it is unreadable or was written for another network/optimiser.
CheckpointMeta load_checkpoint(const std::filesystem::path& path, TrainStep& step);

/// The network a checkpoint's config names: its registry name and the context to build it with.
struct CheckpointModel {
  std::string model;
  models::ModelContext context;
};

/// The network of `meta` (read from `path`, which error messages name); throws IoError where the
/// config is not what voxfit train writes.
CheckpointModel checkpoint_model(const std::filesystem::path& path, const CheckpointMeta& meta);

/// Restores only the network weights (for prediction).
CheckpointMeta load_weights(const std::filesystem::path& path, models::NetworkImpl& network);

}  // namespace voxfit::train
