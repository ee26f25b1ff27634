// kernels::convs_of_concat: the path that keeps a decoder's two inputs instead of their
// concatenation computes what conv(cat({a, b}, 1)) computes (outputs and every gradient, with and
// without a bias and a second convolution, on the CPU here and under fp16 autocast on a GPU), and
// autograd then keeps less: the concatenation's bytes are gone from the saved tensors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <iostream>
#include <vector>

#include "voxfit/core/torch_compat.h"
#include "voxfit/kernels/conv_of_concat.h"
#include "voxfit/kernels/instance_norm_act.h"
#include "voxfit/memory/oom.h"
#include "voxfit/models/blocks/conv_blocks.h"

namespace voxfit::kernels {
namespace {

struct ConcatCase {
  torch::Tensor a, b;
  std::vector<ConcatConv> convs;
};

// a: 3 channels (upsampled), b: 5 channels (the skip), odd spatial sizes; conv1 3x3x3 (stride 1,
// padding 1) and a 1x1x1 projection of stride 2, as a residual block's first layer has them.
ConcatCase concat_case(torch::Device device, bool bias, bool two) {
  torch::manual_seed(7);
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble).device(device);
  ConcatCase c;
  c.a = torch::randn({2, 3, 5, 6, 7}, f64).requires_grad_();
  c.b = torch::randn({2, 5, 5, 6, 7}, f64).requires_grad_();
  ConcatConv c1{torch::randn({4, 8, 3, 3, 3}, f64).requires_grad_(), torch::Tensor(), 1, 1};
  if (bias) c1.bias = torch::randn({4}, f64).requires_grad_();
  c.convs.push_back(c1);
  if (two) c.convs.push_back(ConcatConv{torch::randn({4, 8, 1, 1, 1}, f64).requires_grad_(), torch::Tensor(), 2, 0});
  return c;
}

std::vector<torch::Tensor> concat_leaves(const ConcatCase& c) {
  std::vector<torch::Tensor> out{c.a, c.b};
  for (const auto& conv : c.convs) {
    out.push_back(conv.weight);
    if (conv.bias.defined()) out.push_back(conv.bias);
  }
  return out;
}

// Outputs and the gradients of sum(out_i * g_i) with respect to every leaf.
std::vector<torch::Tensor> run_concat(const ConcatCase& c, bool keeping_parts) {
  const auto outs =
      keeping_parts ? convs_of_concat_keeping_parts(c.a, c.b, c.convs) : convs_of_concat_reference(c.a, c.b, c.convs);
  torch::Tensor total;
  std::vector<torch::Tensor> result;
  for (size_t i = 0; i < outs.size(); ++i) {
    result.push_back(outs[i].detach().to(torch::kDouble));
    const auto g = torch::linspace(-1, 1, outs[i].numel(), outs[i].options()).view_as(outs[i]);
    const auto term = (outs[i] * g).sum();
    total = total.defined() ? total + term : term;
  }
  const auto grads = torch::autograd::grad({total}, concat_leaves(c));
  for (const auto& g : grads) result.push_back(g.to(torch::kDouble));
  return result;
}

TEST(ConvsOfConcat, KeepingThePartsComputesWhatTheConcatenationDoes) {
  for (const bool bias : {false, true}) {
    for (const bool two : {false, true}) {
      SCOPED_TRACE(std::string(bias ? "bias" : "no bias") + (two ? ", two convolutions" : ", one convolution"));
      const auto c = concat_case(torch::kCPU, bias, two);
      const auto ref = run_concat(c, false), fused = run_concat(c, true);
      ASSERT_EQ(ref.size(), fused.size());
      for (size_t i = 0; i < ref.size(); ++i) {
        SCOPED_TRACE("tensor " + std::to_string(i));
        EXPECT_EQ(ref[i].sizes(), fused[i].sizes());
        EXPECT_TRUE(torch::allclose(ref[i], fused[i], 1e-10, 1e-10))
            << "largest difference " << (ref[i] - fused[i]).abs().max().item<double>();
      }
    }
  }
}

TEST(ConvsOfConcat, ADecoderBlockOfTwoInputsIsTheBlockOfTheirConcatenation) {
  torch::manual_seed(3);
  models::UnetBlock block(models::UnetBlockOptions(8, 4));
  block->to(torch::kDouble);
  const auto a = torch::randn({1, 4, 6, 6, 6}, torch::kDouble), b = torch::randn({1, 4, 6, 6, 6}, torch::kDouble);
  EXPECT_TRUE(torch::allclose(block->forward_concat(a, b), block->forward(torch::cat({a, b}, 1))));
  models::ConvStack stack(models::ConvStackOptions(8, 4).bias(true));
  stack->to(torch::kDouble);
  EXPECT_TRUE(torch::allclose(stack->forward_concat(a, b), stack->forward(torch::cat({a, b}, 1))));
}

TEST(ConvsOfConcat, FusesOnlyCudaTensorsUnderAutograd) {
  const KernelModeGuard fused(KernelMode::kFused);
  EXPECT_FALSE(convs_of_concat_fuses(torch::zeros({1, 1, 2, 2, 2})));
}

#if defined(VOXFIT_WITH_CUDA)
int64_t peak_allocated() { return static_cast<int64_t>(compat::device_stats(0).allocated_bytes[0].peak); }
#endif

TEST(ConvsOfConcatCuda, Fp16AutocastMatchesTheReferenceAndKeepsLess) {
#if !defined(VOXFIT_WITH_CUDA)
  GTEST_SKIP() << "needs a CUDA build";
#else
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA GPU";
  const torch::Device cuda(torch::kCUDA);
  torch::manual_seed(11);
  const auto f32 = torch::TensorOptions().device(cuda);
  // A decoder's inputs as autocast leaves them: half precision; float32 weights.
  const auto a0 = torch::randn({2, 16, 24, 24, 24}, f32.dtype(torch::kHalf));
  const auto b0 = torch::randn({2, 16, 24, 24, 24}, f32.dtype(torch::kHalf));
  const auto w1 = (torch::randn({16, 32, 3, 3, 3}, f32) * 0.05).requires_grad_();
  const auto w3 = (torch::randn({16, 32, 1, 1, 1}, f32) * 0.2).requires_grad_();
  const std::vector<ConcatConv> convs{{w1, {}, 1, 1}, {w3, {}, 1, 0}};
  std::vector<std::vector<torch::Tensor> > results;
  std::vector<int64_t> kept, peak;
  for (const bool parts : {false, true}) {
    const auto a = a0.clone().requires_grad_(), b = b0.clone().requires_grad_();
    torch::cuda::synchronize();
    compat::reset_peak_stats(0);
    const auto before = static_cast<int64_t>(memory::current_allocated_bytes(cuda));
    std::vector<torch::Tensor> outs;
    {
      compat::AutocastScope autocast(torch::kCUDA, true, torch::kHalf);
      outs = parts ? convs_of_concat_keeping_parts(a, b, convs) : convs_of_concat_reference(a, b, convs);
    }
    torch::cuda::synchronize();
    // What stays allocated with the outputs alive: the outputs, the weights' half copies and
    // whatever autograd keeps for backward.
    kept.push_back(static_cast<int64_t>(memory::current_allocated_bytes(cuda)) - before);
    const auto total = (outs[0].to(torch::kFloat) * outs[0].to(torch::kFloat)).sum() + outs[1].to(torch::kFloat).sum();
    const auto g = torch::autograd::grad({total}, {a, b, w1, w3});
    torch::cuda::synchronize();
    peak.push_back(peak_allocated() - before);  // forward and backward
    std::vector<torch::Tensor> r{outs[0].to(torch::kFloat), outs[1].to(torch::kFloat)};
    for (const auto& t : g) r.push_back(t.to(torch::kFloat));
    results.push_back(r);
  }
  for (size_t i = 0; i < results[0].size(); ++i) {
    SCOPED_TRACE("tensor " + std::to_string(i));
    const double scale = results[0][i].abs().max().item<double>();
    EXPECT_LT((results[0][i] - results[1][i]).abs().max().item<double>(), 2e-3 * std::max(1.0, scale));
  }
  // The concatenation: 32 channels of 2 x 24^3 half values; keeping the parts stores none of it.
  const int64_t concat_bytes = 2 * 32 * 24 * 24 * 24 * 2;
  EXPECT_LE(kept[1], kept[0] - concat_bytes + concat_bytes / 8) << "reference " << kept[0] << ", parts " << kept[1];
  // Nor does its backward rebuild it: the peak over forward and backward is lower too.
  EXPECT_LT(peak[1], peak[0]) << "reference " << peak[0] << ", parts " << peak[1];
  std::cout << "[ kept ] reference " << kept[0] << ", parts " << kept[1] << " bytes; peak " << peak[0] << " / "
            << peak[1] << "\n";
#endif
}

}  // namespace
}  // namespace voxfit::kernels
