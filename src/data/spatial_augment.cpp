#include "voxfit/data/spatial_augment.h"

#include <torch/torch.h>

#include <cmath>
#include <random>

#include "voxfit/core/error.h"

namespace voxfit::data {

namespace {

double uniform(std::mt19937_64& rng, double lo, double hi) {
  return lo + (hi - lo) * (static_cast<double>(rng() >> 11) * 0x1.0p-53);
}

// Row-major 3x3 product.
std::array<double, 9> matmul(const std::array<double, 9>& a, const std::array<double, 9>& b) {
  std::array<double, 9> c{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k) c[i * 3 + j] += a[i * 3 + k] * b[k * 3 + j];
  return c;
}

}  // namespace

void augment_spatial(Batch& batch, const SpatialAugmentOptions& o, std::uint64_t seed) {
  if (!batch.image.defined() || batch.image.dim() != 5 || !batch.label.defined() || batch.label.dim() != 5)
    throw DataError("spatial augmentation: expected image [B, C, D, H, W] and label [B, 1, D, H, W]");
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> chosen;
  std::vector<float> thetas;
  const double max_rad = o.max_rotation_degrees * M_PI / 180.0;
  for (std::int64_t b = 0; b < batch.image.size(0); ++b) {
    // Every sample consumes the same draws, chosen or not, so sample b's transform depends only
    // on the seed and b.
    const bool pick = uniform(rng, 0, 1) < o.probability;
    std::array<double, 3> angle{};
    for (auto& a : angle) a = uniform(rng, -max_rad, max_rad);
    const double scale = uniform(rng, o.scale_range[0], o.scale_range[1]);
    if (!pick) continue;
    const double cx = std::cos(angle[0]), sx = std::sin(angle[0]);
    const double cy = std::cos(angle[1]), sy = std::sin(angle[1]);
    const double cz = std::cos(angle[2]), sz = std::sin(angle[2]);
    const std::array<double, 9> rx{1, 0, 0, 0, cx, -sx, 0, sx, cx};
    const std::array<double, 9> ry{cy, 0, sy, 0, 1, 0, -sy, 0, cy};
    const std::array<double, 9> rz{cz, -sz, 0, sz, cz, 0, 0, 0, 1};
    const std::array<double, 9> r = matmul(rz, matmul(ry, rx));
    // theta maps output to input coordinates: zooming in by `scale` samples a region 1/scale wide.
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) thetas.push_back(static_cast<float>(r[i * 3 + j] / scale));
      thetas.push_back(0.0f);
    }
    chosen.push_back(b);
  }
  if (chosen.empty()) return;
  const auto device = batch.image.device();
  const auto n = static_cast<std::int64_t>(chosen.size());
  // To a CUDA device through pinned memory without waiting: a pageable copy would block the host
  // until the GPU has run everything queued before it (the previous step).
  const auto upload = [&device](const torch::Tensor& host) {
    return device.is_cuda() ? host.pin_memory().to(device, /*non_blocking=*/true) : host.to(device);
  };
  const torch::Tensor idx = upload(torch::tensor(chosen, torch::kInt64));
  const torch::Tensor theta =
      upload(torch::from_blob(thetas.data(), {n, 3, 4}, torch::kFloat32)).to(batch.image.scalar_type());
  const torch::Tensor image = batch.image.index_select(0, idx);
  const torch::Tensor grid = torch::affine_grid_generator(theta, image.sizes(), /*align_corners=*/false);
  // grid_sampler modes: interpolation 0 = (tri)linear, 1 = nearest; padding 0 = zeros.
  const torch::Tensor moved = torch::grid_sampler(image, grid, 0, 0, false);
  const torch::Tensor label = batch.label.index_select(0, idx).to(grid.scalar_type());
  const torch::Tensor moved_label = torch::grid_sampler(label, grid, 1, 0, false).round().to(batch.label.scalar_type());
  batch.image.index_copy_(0, idx, moved);
  batch.label.index_copy_(0, idx, moved_label);
}

}  // namespace voxfit::data
