#include "voxfit/train/predictor.h"

#include <nlohmann/json.hpp>

#include "voxfit/core/error.h"
#include "voxfit/data/preprocess.h"
#include "voxfit/train/checkpoint.h"

namespace voxfit::train {

namespace fs = std::filesystem;

Predictor::Predictor(const fs::path& checkpoint, torch::Device device, double overlap, std::int64_t window_batch) {
  const auto meta = read_checkpoint_meta(checkpoint);
  const auto [model, ctx] = checkpoint_model(checkpoint, meta);
  std::string precision;
  try {
    precision = nlohmann::json::parse(meta.config_json).at("precision").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw IoError(checkpoint.string() + ": its config is not what voxfit writes (" + e.what() + ")");
  }
  const fs::path run_dir = checkpoint.parent_path().empty() ? fs::path(".") : checkpoint.parent_path();
  if (!fs::exists(run_dir / "plan.json"))
    throw IoError((run_dir / "plan.json").string() + ": missing (predict needs the plan saved beside the checkpoint)");
  plan_ = data::load_plan(run_dir);
  StepOptions so;
  so.precision = parse_precision(precision);
  if (so.precision == Precision::kFp16 && !device.is_cuda()) so.precision = Precision::kFp32;
  so.channels_last = ctx.channels_last;
  so.spatial_augment.reset();
  step_ = std::make_unique<TrainStep>(models::make_model(model, ctx), device, so);
  load_weights(checkpoint, step_->network());
  step_->network().eval();
  sw_.patch = ctx.patch;
  sw_.overlap = overlap;
  sw_.window_batch = window_batch;
}

Predictor::~Predictor() = default;

Volume Predictor::predict(const Channels& channels) {
  if (static_cast<int>(channels.size()) != plan_.channels())
    throw DataError("predict: the model takes " + std::to_string(plan_.channels()) + " channel(s), got " +
                    std::to_string(channels.size()));
  const auto input = data::preprocess_for_inference(plan_, channels);
  const auto logits = sliding_window_inference_on(
      input.image, step_->device(), [&](const torch::Tensor& x) { return step_->infer(x); }, sw_);
  return data::restore_prediction(plan_, input, logits.argmax(0).cpu());
}

}  // namespace voxfit::train
