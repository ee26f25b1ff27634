#include "voxfit/train/sliding_window.h"

#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>

#include "voxfit/core/error.h"
#include "voxfit/core/host_memory.h"
#include "voxfit/memory/oom.h"

namespace voxfit::train {

namespace F = torch::nn::functional;

torch::Tensor gaussian_importance(const std::vector<int64_t>& patch, torch::Device device) {
  torch::Tensor map;
  for (std::size_t d = 0; d < patch.size(); ++d) {
    const double sigma = static_cast<double>(patch[d]) / 8.0;
    const auto x = torch::arange(patch[d], torch::kDouble) - (static_cast<double>(patch[d]) - 1.0) / 2.0;
    auto g = torch::exp(-(x * x) / (2.0 * sigma * sigma));
    std::vector<int64_t> shape(patch.size(), 1);
    shape[d] = patch[d];
    g = g.view(shape);
    map = map.defined() ? map * g : g;
  }
  map = map / map.max();
  const auto smallest = map.masked_select(map > 0).min();
  map = torch::where(map > 0, map, smallest);
  return map.to(torch::kFloat).to(device);
}

namespace {

// Window starts along one axis: evenly spaced so that neighbours share at least `overlap`.
std::vector<int64_t> window_starts(int64_t size, int64_t window, double overlap) {
  if (size <= window) return {0};
  const double step = static_cast<double>(window) * (1.0 - overlap);
  const int64_t n = static_cast<int64_t>(std::ceil(static_cast<double>(size - window) / step)) + 1;
  std::vector<int64_t> starts;
  const double actual = static_cast<double>(size - window) / static_cast<double>(n - 1);
  for (int64_t i = 0; i < n; ++i) starts.push_back(static_cast<int64_t>(std::llround(actual * static_cast<double>(i))));
  return starts;
}

}  // namespace

torch::Tensor sliding_window_inference(const torch::Tensor& image, const LogitsFn& net, const SlidingWindowOptions& o) {
  TORCH_CHECK(image.dim() == 4, "sliding window: expected an image [C, D, H, W], got ", image.sizes());
  if (o.patch.size() != 3) throw ConfigError("sliding window: the window must have 3 sizes");
  if (!(o.overlap >= 0.0 && o.overlap < 1.0)) throw ConfigError("--overlap must be in [0, 1)");
  if (o.window_batch < 1) throw ConfigError("--window-batch must be >= 1");
  torch::NoGradGuard no_grad;

  // Where the volume-sized tensors live, and where the windows run.
  const torch::Device device = o.host_aggregation ? torch::Device(torch::kCPU) : image.device();
  const torch::Device window_device = o.host_aggregation ? o.window_device : image.device();
  // Volume-sized host buffers are host memory, also when a CPU budget emulates the card.
  const auto volume_sized = [&](const std::function<torch::Tensor()>& make) {
    std::optional<HostMemoryScope> host;
    if (o.host_aggregation) host.emplace();
    return make();
  };

  // Pad each axis up to the window, symmetrically, and remember the crop.
  std::vector<int64_t> pad;  // F::pad order: last axis first
  std::vector<int64_t> lo(3), size(3);
  for (int d = 2; d >= 0; --d) {
    const int64_t s = image.size(d + 1);
    const int64_t missing = std::max<int64_t>(0, o.patch[d] - s);
    lo[d] = missing / 2;
    pad.push_back(lo[d]);
    pad.push_back(missing - lo[d]);
  }
  const auto padded =
      volume_sized([&] { return F::pad(image.to(device).unsqueeze(0), F::PadFuncOptions(pad)).squeeze(0); });
  for (int d = 0; d < 3; ++d) size[d] = padded.size(d + 1);

  const auto weight =
      o.gaussian ? gaussian_importance(o.patch, device) : torch::ones(o.patch, torch::TensorOptions().device(device));
  torch::Tensor logits_sum,
      weight_sum = volume_sized([&] { return torch::zeros(size, torch::TensorOptions().device(device)); });

  std::vector<std::array<int64_t, 3>> windows;
  for (auto z : window_starts(size[0], o.patch[0], o.overlap))
    for (auto y : window_starts(size[1], o.patch[1], o.overlap))
      for (auto x : window_starts(size[2], o.patch[2], o.overlap)) windows.push_back({z, y, x});

  for (std::size_t first = 0; first < windows.size(); first += static_cast<std::size_t>(o.window_batch)) {
    const std::size_t last = std::min(windows.size(), first + static_cast<std::size_t>(o.window_batch));
    std::vector<torch::Tensor> crops;
    for (std::size_t w = first; w < last; ++w) {
      const auto& s = windows[w];
      crops.push_back(padded.narrow(1, s[0], o.patch[0]).narrow(2, s[1], o.patch[1]).narrow(3, s[2], o.patch[2]));
    }
    const auto out = net(torch::stack(crops).to(window_device)).to(device, torch::kFloat);
    if (!logits_sum.defined())
      logits_sum = volume_sized([&] { return torch::zeros({out.size(1), size[0], size[1], size[2]}, out.options()); });
    for (std::size_t w = first; w < last; ++w) {
      const auto& s = windows[w];
      logits_sum.narrow(1, s[0], o.patch[0])
          .narrow(2, s[1], o.patch[1])
          .narrow(3, s[2], o.patch[2])
          .add_(out[static_cast<int64_t>(w - first)] * weight);
      weight_sum.narrow(0, s[0], o.patch[0]).narrow(1, s[1], o.patch[1]).narrow(2, s[2], o.patch[2]).add_(weight);
    }
  }
  const auto result = logits_sum.div_(weight_sum.unsqueeze(0));  // in place: no second volume
  return result.narrow(1, lo[0], image.size(1)).narrow(2, lo[1], image.size(2)).narrow(3, lo[2], image.size(3));
}

torch::Tensor sliding_window_inference_on(const torch::Tensor& image, torch::Device device, const LogitsFn& net,
                                          SlidingWindowOptions o) {
  try {
    o.host_aggregation = false;
    return sliding_window_inference(image.to(device), net, o);
  } catch (const std::exception& e) {
    if (!memory::is_oom(e)) throw;
  }
  memory::recover_after_oom(device);  // nothing of the first attempt is alive here
  o.host_aggregation = true;
  o.window_device = device;
  return sliding_window_inference(image, net, o);
}

std::vector<double> dice_per_class(const torch::Tensor& prediction, const torch::Tensor& truth, int64_t classes) {
  TORCH_CHECK(prediction.sizes() == truth.sizes(), "dice: prediction ", prediction.sizes(), " vs truth ",
              truth.sizes());
  std::vector<double> out;
  for (int64_t c = 1; c < classes; ++c) {
    const auto p = prediction == c, t = truth == c;
    const double in_truth = t.sum().item<double>();
    if (in_truth == 0) {
      out.push_back(std::numeric_limits<double>::quiet_NaN());
      continue;
    }
    const double tp = (p & t).sum().item<double>();
    out.push_back(2.0 * tp / (p.sum().item<double>() + in_truth));
  }
  return out;
}

double nan_mean(const std::vector<double>& values) {
  double sum = 0;
  int n = 0;
  for (double v : values)
    if (!std::isnan(v)) {
      sum += v;
      ++n;
    }
  return n == 0 ? std::numeric_limits<double>::quiet_NaN() : sum / n;
}

DiceSummary summarize_dice(const std::vector<std::vector<double>>& per_case) {
  DiceSummary s;
  if (per_case.empty()) {
    s.mean = std::numeric_limits<double>::quiet_NaN();
    return s;
  }
  const std::size_t classes = per_case.front().size();
  std::vector<double> case_means;
  for (const auto& d : per_case) {
    TORCH_CHECK(d.size() == classes, "dice: cases with ", classes, " and ", d.size(), " classes");
    case_means.push_back(nan_mean(d));
  }
  for (std::size_t k = 0; k < classes; ++k) {
    std::vector<double> column;
    for (const auto& d : per_case) column.push_back(d[k]);
    s.per_class.push_back(nan_mean(column));
  }
  s.mean = nan_mean(case_means);
  return s;
}

}  // namespace voxfit::train
