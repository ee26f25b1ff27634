// kernels::depthwise_conv3d: the reference is the grouped convolution MedNeXt's blocks held before,
// CPU tensors never take the CUDA kernels, and (on a CUDA build with a GPU) the kernels match a
// float64 reference in the output and in the input, weight and bias gradients for three dtypes,
// kernel sizes 3 and 5 and sizes that leave partial tiles on every axis; the weight gradient is
// deterministic; under fp16 autocast it matches ATen's convolution. MedNeXt does not call it yet:
// it will once these tests have passed on a GPU. The same kernel source runs on the CPU in
// test_depthwise_conv_emulated.cpp on every build.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "kernel_test_support.h"
#include "voxfit/core/torch_compat.h"
#include "voxfit/kernels/depthwise_conv.h"
#include "voxfit/kernels/instance_norm_act.h"

namespace voxfit::kernels {
namespace {

using test::cuda_here;
using test::relative_error;
using test::tolerance;

TEST(DepthwiseConv, ReferenceIsTheGroupedConvolutionModule) {
  torch::manual_seed(0);
  for (const int64_t k : {3, 5}) {
    torch::nn::Conv3d conv(torch::nn::Conv3dOptions(6, 6, k).padding(k / 2).groups(6));
    const auto x = torch::randn({2, 6, 7, 9, 5});
    const auto want = conv(x);
    EXPECT_TRUE(torch::equal(depthwise_conv3d_reference(x, conv->weight, conv->bias), want)) << k;
    EXPECT_TRUE(torch::equal(depthwise_conv3d(x, conv->weight, conv->bias), want)) << k;
    EXPECT_TRUE(torch::equal(depthwise_conv3d(x, conv->weight, {}), torch::conv3d(x, conv->weight, {}, 1, k / 2, 1, 6)))
        << k;
  }
}

TEST(DepthwiseConv, NeverFusesCpuTensorsOrOtherShapes) {
  KernelModeGuard fused(KernelMode::kFused);
  const auto w = torch::randn({4, 1, 3, 3, 3});
  EXPECT_FALSE(fused_depthwise_conv3d_applies(torch::randn({1, 4, 8, 8, 8}), w));
  if (!cuda_here()) GTEST_SKIP() << "no CUDA in this build or machine: the CUDA shapes are not checked";
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const auto wc = w.to(torch::kCUDA);
  EXPECT_TRUE(fused_depthwise_conv3d_applies(torch::randn({1, 4, 8, 8, 8}, cuda), wc));
  EXPECT_FALSE(fused_depthwise_conv3d_applies(
      torch::randn({1, 4, 8, 8, 8}, cuda).contiguous(c10::MemoryFormat::ChannelsLast3d), wc));  // NDHWC: cuDNN
  EXPECT_FALSE(
      fused_depthwise_conv3d_applies(torch::randn({1, 4, 8, 8, 8}, cuda), torch::randn({4, 1, 7, 7, 7}, cuda)));
  EXPECT_FALSE(
      fused_depthwise_conv3d_applies(torch::randn({1, 4, 8, 8, 8}, cuda), torch::randn({4, 2, 3, 3, 3}, cuda)));
  KernelModeGuard aten(KernelMode::kAten);
  EXPECT_FALSE(fused_depthwise_conv3d_applies(torch::randn({1, 4, 8, 8, 8}, cuda), wc));
}

struct Grads {
  torch::Tensor y, dx, dw, db;
};

// y = depthwise_conv3d(x, w, b) in `dtype` (the reference path in float64 when !fused), and the
// gradients of sum(y * g).
Grads run(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, const torch::Tensor& g,
          torch::ScalarType dtype, bool fused) {
  KernelModeGuard mode(fused ? KernelMode::kFused : KernelMode::kAten);
  auto xi = x.to(dtype).detach().requires_grad_();
  auto wi = w.to(fused ? torch::kFloat : torch::kDouble).detach().requires_grad_();
  auto bi = b.to(fused ? torch::kFloat : torch::kDouble).detach().requires_grad_();
  if (fused) {
    EXPECT_TRUE(fused_depthwise_conv3d_applies(xi, wi));
  }
  const auto y = fused ? depthwise_conv3d(xi, wi, bi) : depthwise_conv3d_reference(xi, wi, bi);
  (y.to(torch::kDouble) * g).sum().backward();
  return {y.to(torch::kDouble).detach(), xi.grad().to(torch::kDouble), wi.grad().to(torch::kDouble),
          bi.grad().to(torch::kDouble)};
}

TEST(DepthwiseConvCuda, FusedMatchesFloat64ReferenceInOutputAndEveryGradient) {
  if (!cuda_here()) GTEST_SKIP() << "no CUDA in this build or machine";
  // Partial tiles on every axis (tiles of 8 x 8 x 32), one channel, and more than one D chunk.
  const std::vector<std::vector<int64_t>> shapes = {{2, 3, 11, 13, 37}, {1, 1, 5, 4, 3}, {2, 5, 40, 9, 33}};
  const auto opts = torch::TensorOptions().dtype(torch::kDouble).device(torch::kCUDA);
  int checked = 0;
  for (const auto& shape : shapes)
    for (const int64_t k : {3, 5})
      for (const auto dtype : {torch::kFloat, torch::kHalf, torch::kBFloat16}) {
        torch::manual_seed(checked);
        const auto x = torch::randn(shape, opts);
        const auto w = torch::randn({shape[1], 1, k, k, k}, opts) / k, b = torch::randn({shape[1]}, opts);
        const auto g = torch::randn(shape, opts);
        const auto want = run(x.to(dtype).to(torch::kDouble), w, b, g, torch::kDouble, false);
        const auto got = run(x, w, b, g, dtype, true);
        const std::string what = "k " + std::to_string(k) + ", " + std::string(c10::toString(dtype)) + ", shape " +
                                 std::to_string(shape[2]) + "x" + std::to_string(shape[3]) + "x" +
                                 std::to_string(shape[4]);
        const double tol = tolerance(dtype);
        EXPECT_LT(relative_error(got.y, want.y), tol) << "y, " << what;
        EXPECT_LT(relative_error(got.dx, want.dx), tol) << "dx, " << what;
        EXPECT_LT(relative_error(got.dw, want.dw), tol) << "dweight, " << what;
        EXPECT_LT(relative_error(got.db, want.db), tol) << "dbias, " << what;
        ++checked;
      }
  EXPECT_EQ(checked, 3 * 2 * 3);
}

TEST(DepthwiseConvCuda, SameInputGivesTheSameBits) {
  if (!cuda_here()) GTEST_SKIP() << "no CUDA in this build or machine";
  KernelModeGuard fused(KernelMode::kFused);
  const auto half = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kHalf);
  const auto x = torch::randn({2, 16, 24, 24, 40}, half);
  const auto g = torch::randn({2, 16, 24, 24, 40}, half);
  const auto w = torch::randn({16, 1, 3, 3, 3}, torch::kCUDA).requires_grad_();
  std::vector<torch::Tensor> grads;
  for (int i = 0; i < 2; ++i) {
    (depthwise_conv3d(x, w, {}).to(torch::kFloat) * g).sum().backward();
    grads.push_back(w.grad().clone());
    w.mutable_grad().zero_();
  }
  EXPECT_TRUE(torch::equal(grads[0], grads[1]));
}

// Under fp16 autocast (as training runs it) the kernels see the input cast to half, as ATen's
// convolution does, and give the same output and gradients within half-precision rounding.
TEST(DepthwiseConvCuda, UnderAutocastMatchesTheAtenConvolution) {
  if (!cuda_here()) GTEST_SKIP() << "no CUDA in this build or machine";
  torch::manual_seed(0);
  for (const int64_t k : {3, 5}) {
    const auto x0 = torch::randn({2, 8, 20, 18, 36}, torch::kCUDA);
    const auto w0 = torch::randn({8, 1, k, k, k}, torch::kCUDA) / k, b0 = torch::randn({8}, torch::kCUDA);
    std::vector<torch::Tensor> outs, grads;
    for (const auto mode : {KernelMode::kAten, KernelMode::kFused}) {
      KernelModeGuard guard(mode);
      const auto x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
      compat::set_autocast(torch::kCUDA, true, torch::kHalf);
      EXPECT_EQ(fused_depthwise_conv3d_applies(x, w), mode == KernelMode::kFused);
      const auto y = depthwise_conv3d(x, w, b);
      compat::set_autocast(torch::kCUDA, false, torch::kHalf);
      at::autocast::clear_cache();
      EXPECT_EQ(y.scalar_type(), torch::kHalf);
      y.to(torch::kFloat).square().mean().backward();
      outs.push_back(y.to(torch::kFloat).detach());
      grads.push_back(torch::cat({x.grad().flatten(), w.grad().flatten(), b.grad().flatten()}));
    }
    EXPECT_LT(relative_error(outs[1], outs[0].to(torch::kDouble)), 1e-2) << "k " << k;
    EXPECT_LT(relative_error(grads[1], grads[0].to(torch::kDouble)), 3e-2) << "k " << k;
  }
}

}  // namespace
}  // namespace voxfit::kernels
