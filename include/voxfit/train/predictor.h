#pragma once
// `voxfit predict`: a trained checkpoint applied to new images — preprocessed like the training
// cases (the run's plan.json), segmented by sliding window, mapped back onto the input's grid.
#include <filesystem>
#include <memory>

#include "voxfit/core/volume.h"
#include "voxfit/data/plan.h"
#include "voxfit/train/sliding_window.h"
#include "voxfit/train/train_step.h"

namespace voxfit::train {

class Predictor {
 public:
  /// Reads the checkpoint's config, the plan.json beside it, and the weights. `overlap` and
  /// `window_batch` override the sliding window (the window is the training patch).
  Predictor(const std::filesystem::path& checkpoint, torch::Device device, double overlap = 0.5,
            std::int64_t window_batch = 2);
  ~Predictor();

  /// The label map of one case (its channels in the plan's order), on the input's grid and geometry.
  Volume predict(const Channels& channels);
  const data::Plan& plan() const { return plan_; }

 private:
  data::Plan plan_;
  SlidingWindowOptions sw_;
  std::unique_ptr<TrainStep> step_;
};

}  // namespace voxfit::train
