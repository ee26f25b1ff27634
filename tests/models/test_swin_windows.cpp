// SwinUNETR's window moves: the gathers of `--kernels fused` (to_windows / from_windows) give the
// same values and gradients as MONAI's pad, roll, window partition, reverse, roll back and crop
// (the `--kernels aten` reference): both only move numbers, so the windows are bit-identical and a
// block's output and gradients agree to float rounding.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "voxfit/kernels/instance_norm_act.h"
#include "voxfit/models/blocks/swin.h"

namespace voxfit::models {
namespace {

using kernels::KernelMode;
using kernels::KernelModeGuard;

// MONAI's way: pad to whole windows, roll by -shift, partition ([B, D, H, W, C] -> [B*nW, n, C]).
torch::Tensor reference_windows(const torch::Tensor& x, const Size3& w, const Size3& s) {
  Size3 pad;
  for (int i = 0; i < 3; ++i) pad[i] = (w[i] - x.size(i + 1) % w[i]) % w[i];
  auto y = torch::constant_pad_nd(x, {0, 0, 0, pad[2], 0, pad[1], 0, pad[0]});
  y = torch::roll(y, {-s[0], -s[1], -s[2]}, {1, 2, 3});
  const int64_t b = y.size(0), c = y.size(4);
  return y.view({b, y.size(1) / w[0], w[0], y.size(2) / w[1], w[1], y.size(3) / w[2], w[2], c})
      .permute({0, 1, 3, 5, 2, 4, 6, 7})
      .reshape({-1, w[0] * w[1] * w[2], c});
}

TEST(SwinWindows, GatherEqualsPadRollPartitionAndBack) {
  const Size3 size = {5, 6, 7}, w = {3, 3, 3}, s = {1, 2, 1};  // every axis padded, every axis shifted
  const auto x = torch::randn({2, 5, 6, 7, 4}, torch::kDouble);
  const WindowOrder order = window_order(size, w, s, torch::kCPU);
  const auto windows = to_windows(x.reshape({2, -1, 4}), order).view({-1, 27, 4});
  const auto expected = reference_windows(x, w, s);
  ASSERT_EQ(windows.sizes(), expected.sizes());
  EXPECT_TRUE(torch::equal(windows, expected));
  // Back: every token from its window position; the padding positions are dropped.
  const auto back = from_windows(windows.view({2, -1, 4}), order).view(x.sizes());
  EXPECT_TRUE(torch::equal(back, x));
}

TEST(SwinWindows, GathersHaveEachOthersGradientAndPaddingGetsNone) {
  const Size3 size = {4, 5, 3}, w = {2, 2, 2}, s = {1, 1, 1};
  const WindowOrder order = window_order(size, w, s, torch::kCPU);
  auto x = torch::randn({2, 60, 3}, torch::kDouble).requires_grad_();
  const auto g = torch::randn({2, 4 * 6 * 4, 3}, torch::kDouble);  // padded 4 x 6 x 4
  (to_windows(x, order) * g).sum().backward();
  // d/dx of sum(to_windows(x) * g) is g moved back to the tokens.
  EXPECT_TRUE(torch::equal(x.grad(), from_windows(g, order)));
  auto win = torch::randn({2, 96, 3}, torch::kDouble).requires_grad_();
  const auto gt = torch::randn({2, 60, 3}, torch::kDouble);
  (from_windows(win, order) * gt).sum().backward();
  EXPECT_TRUE(torch::equal(win.grad(), to_windows(gt, order)));
  EXPECT_EQ(win.grad().index_select(1, order.padding).abs().sum().item<double>(), 0.0);
}

// float32: Module::to(kDouble) would also turn the relative-position index into doubles.
TEST(SwinWindows, BlockGivesTheReferenceOutputAndGradients) {
  const Size3 window = {3, 3, 3}, shift = {1, 1, 1}, size = {5, 4, 6};
  torch::manual_seed(0);
  SwinBlock block(8, 2, window, shift, 2.0, true, AttentionMode::kMath);
  const auto x = torch::randn({2, 5, 4, 6, 8});
  const auto [w, s] = window_and_shift(size, window, shift);
  Size3 padded;
  for (int i = 0; i < 3; ++i) padded[i] = size[i] + (w[i] - size[i] % w[i]) % w[i];
  const auto mask = shifted_window_mask(padded, w, s, torch::kCPU);
  std::vector<torch::Tensor> outputs, grads;
  for (const auto mode : {KernelMode::kAten, KernelMode::kFused}) {
    const KernelModeGuard guard(mode);
    block->zero_grad();
    auto in = x.clone().requires_grad_();
    const auto y = block->forward(in, mask);
    (y * torch::linspace(-1, 1, y.numel()).view(y.sizes())).sum().backward();
    outputs.push_back(y.detach());
    grads.push_back(in.grad());
    for (const auto& p : block->parameters()) grads.push_back(p.grad().clone());
  }
  EXPECT_TRUE(torch::equal(outputs[0], outputs[1])) << (outputs[0] - outputs[1]).abs().max().item<double>();
  const size_t n = grads.size() / 2;
  for (size_t i = 0; i < n; ++i)
    EXPECT_TRUE(torch::allclose(grads[i], grads[n + i], 1e-5, 1e-6))
        << "gradient " << i << " differs by " << (grads[i] - grads[n + i]).abs().max().item<double>();
}

}  // namespace
}  // namespace voxfit::models
