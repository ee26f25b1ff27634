// The depthwise 3D convolution's CUDA kernels (src/kernels/depthwise_conv_kernels.cuh), run on the
// CPU by cuda_emulation.h on every build: the forward kernel, the same kernel with the flipped filter
// as the input gradient, and the weight / bias gradient kernel with its finalize launch, against
// LibTorch's float64 convolution and its autograd, for k 3 and 5 on shapes that leave partial tiles
// on every axis and span more than one weight-gradient chunk along D. The launches here use the
// launchers' grids (depthwise_conv.cu). On a GPU the compiled kernels are checked again
// (DepthwiseConvCuda.*).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

// The emulation first: the kernels' source is compiled against it.
#include "cuda_emulation.h"
// clang-format off
#include "../../src/kernels/depthwise_conv_kernels.cuh"
// clang-format on

namespace voxfit::kernels::cuda {
namespace {

struct Volume {
  std::int64_t n, c, d, h, w;
};

// What depthwise3d_forward launches (kernel K, float data).
template <int K>
torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  const Volume v{x.size(0), x.size(1), x.size(2), x.size(3), x.size(4)};
  const Grid g = grid_of(v.d, v.h, v.w);
  auto y = torch::full_like(x, std::nanf(""));
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  emulate_launch(
      {static_cast<unsigned>(v.n * v.c), static_cast<unsigned>(g.tiles_hw()), static_cast<unsigned>(g.tiles_d)},
      kThreads, [&] {
        depthwise3d_forward_kernel<float, K>(xp, wp, bp, yp, static_cast<int>(v.c), static_cast<int>(v.d),
                                             static_cast<int>(v.h), static_cast<int>(v.w), static_cast<int>(g.tiles_w));
      });
  return y;
}

// What depthwise3d_backward_weight launches: the per-block sums, then the finalize.
template <int K>
std::pair<torch::Tensor, torch::Tensor> weight_grad(const torch::Tensor& x, const torch::Tensor& dy) {
  const Volume v{x.size(0), x.size(1), x.size(2), x.size(3), x.size(4)};
  const Grid g = grid_of(v.d, v.h, v.w);
  constexpr int T1 = K * K * K + 1;
  auto ws = torch::full({v.n * v.c * g.tiles_hw() * g.chunks_d * T1}, std::nanf(""));
  auto dw = torch::full({v.c, K * K * K}, std::nanf("")), db = torch::full({v.c}, std::nanf(""));
  const float* xp = x.data_ptr<float>();
  const float* gp = dy.data_ptr<float>();
  float* wsp = ws.data_ptr<float>();
  emulate_launch(
      {static_cast<unsigned>(v.n * v.c), static_cast<unsigned>(g.tiles_hw()), static_cast<unsigned>(g.chunks_d)},
      kThreads, [&] {
        depthwise3d_weight_kernel<float, K>(xp, gp, wsp, static_cast<int>(v.d), static_cast<int>(v.h),
                                            static_cast<int>(v.w), static_cast<int>(g.tiles_w),
                                            static_cast<int>(g.tiles_d));
      });
  const std::int64_t outputs = v.c * T1;
  float* dwp = dw.data_ptr<float>();
  float* dbp = db.data_ptr<float>();
  emulate_launch({static_cast<unsigned>((outputs + 255) / 256), 1, 1}, 256,
                 [&] { depthwise3d_weight_finalize(wsp, dwp, dbp, v.n, v.c, g.tiles_hw() * g.chunks_d, T1); });
  return {dw, db};
}

double relative_error(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kDouble) - want).abs().max().item<double>() / (want.abs().max().item<double>() + 1e-12);
}

template <int K>
void check(const std::vector<std::int64_t>& shape) {
  torch::manual_seed(static_cast<std::uint64_t>(K * 1000 + shape[2]));
  const auto x = torch::randn(shape, torch::kDouble), g = torch::randn(shape, torch::kDouble);
  const auto w = torch::randn({shape[1], 1, K, K, K}, torch::kDouble) / K, b = torch::randn({shape[1]}, torch::kDouble);
  const std::string what = "k " + std::to_string(K) + ", " + std::to_string(shape[0]) + "x" + std::to_string(shape[1]) +
                           "x" + std::to_string(shape[2]) + "x" + std::to_string(shape[3]) + "x" +
                           std::to_string(shape[4]);
  // The float64 reference: the grouped convolution and its gradients of sum(y * g).
  const auto xr = x.clone().requires_grad_(), wr = w.clone().requires_grad_(), br = b.clone().requires_grad_();
  const auto yr = torch::conv3d(xr, wr, br, 1, K / 2, 1, shape[1]);
  (yr * g).sum().backward();

  const auto xf = x.to(torch::kFloat).contiguous(), gf = g.to(torch::kFloat).contiguous();
  const auto taps = w.to(torch::kFloat).contiguous(), flipped = w.flip({2, 3, 4}).to(torch::kFloat).contiguous();
  const auto y = forward<K>(xf, taps, b.to(torch::kFloat));
  EXPECT_LT(relative_error(y, yr.detach()), 1e-5) << "y, " << what;
  const auto dx = forward<K>(gf, flipped, torch::Tensor());
  EXPECT_LT(relative_error(dx, xr.grad()), 1e-5) << "dx, " << what;
  const auto [dw, db] = weight_grad<K>(xf, gf);
  EXPECT_LT(relative_error(dw.view(w.sizes()), wr.grad()), 1e-5) << "dweight, " << what;
  EXPECT_LT(relative_error(db, br.grad()), 1e-5) << "dbias, " << what;
}

TEST(DepthwiseConvEmulated, KernelsMatchFloat64ConvolutionAndItsGradients) {
  // Partial tiles (8 x 8 x 32) on every axis, several samples and channels; 40 deep: 5 D tiles,
  // two weight-gradient chunks; one channel of a volume smaller than a tile. (An emulated warp
  // shuffle costs two barriers of 32 OS threads: k = 5 runs on the smaller shapes.)
  check<3>({2, 2, 11, 10, 35});
  check<3>({1, 1, 40, 9, 33});
  check<5>({1, 2, 11, 10, 35});
  check<5>({1, 1, 5, 4, 3});
}

}  // namespace
}  // namespace voxfit::kernels::cuda

#include "cuda_emulation_end.h"
