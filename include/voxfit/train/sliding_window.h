#pragma once
// Whole-volume inference by overlapping patches with Gaussian importance weighting (nnU-Net), and
// the Dice metric used for validation.
#include <torch/types.h>

#include <functional>
#include <vector>

namespace voxfit::train {

struct SlidingWindowOptions {
  std::vector<int64_t> patch = {96, 96, 96};  ///< window size (the training patch)
  double overlap = 0.5;                       ///< fraction of the window shared by neighbours, in [0, 1)
  int64_t window_batch = 2;                   ///< windows per forward pass
  bool gaussian = true;                       ///< importance weights peaked at the window centre (sigma = size/8)
  /// Keep the padded image and the summed logits in host memory and run only the windows on
  /// `window_device` (nnU-Net's fallback for volumes whose logits do not fit on the card).
  bool host_aggregation = false;
  torch::Device window_device = torch::kCPU;  ///< with host_aggregation: where the windows run
};

/// A network in eval mode: [N, C, d, h, w] -> logits [N, K, d, h, w].
using LogitsFn = std::function<torch::Tensor(const torch::Tensor&)>;

/// nnU-Net's importance map: a Gaussian with sigma = size/8 per axis, maximum 1, no zeros.
torch::Tensor gaussian_importance(const std::vector<int64_t>& patch, torch::Device device);

/// Logits [K, D, H, W] (float32) for `image` [C, D, H, W]; volumes smaller than the window are
/// padded with zeros and the padding is cropped again. Windows run on the image's device (on
/// o.window_device, the rest in host memory, with o.host_aggregation).
torch::Tensor sliding_window_inference(const torch::Tensor& image, const LogitsFn& net, const SlidingWindowOptions& o);

/// Dice per foreground class 1..K-1 of a predicted label map against the truth (both [D, H, W]
/// class indices), as MONAI's DiceMetric(include_background=False, ignore_empty=True): a class
/// absent from the truth gets NaN, whatever was predicted (left out of every mean), so a perfect
/// prediction scores 1 and an empty one 0 for each class present in the truth.
std::vector<double> dice_per_class(const torch::Tensor& prediction, const torch::Tensor& truth, int64_t classes);

/// Mean over the non-NaN entries; NaN if all are NaN.
double nan_mean(const std::vector<double>& values);

/// The Dice of several cases reduced as MONAI's DiceMetric does, NaN entries left out.
struct DiceSummary {
  std::vector<double> per_class;  ///< per class, the mean over the cases (MONAI's "mean_batch")
  double mean = 0;                ///< per case the mean over its classes, then the mean over the cases (MONAI's "mean")
};

/// `per_case[i]` holds case i's dice_per_class. A class or mean with no value is NaN (MONAI says 0,
/// which would read as a measured failure).
DiceSummary summarize_dice(const std::vector<std::vector<double>>& per_case);

/// nnU-Net's policy: everything on `device`; when the volume-sized buffers run out of memory
/// there, the allocator is emptied and the inference runs again with them in host memory and only
/// the windows on `device`. `image` may be anywhere; the logits come back where they were summed.
torch::Tensor sliding_window_inference_on(const torch::Tensor& image, torch::Device device, const LogitsFn& net,
                                          SlidingWindowOptions o);

}  // namespace voxfit::train
