// kernels::batch_norm_act: the ATen reference is what torch::nn::BatchNorm3d and the in-place
// activation ran (output and running statistics, momentum or cumulative average, training and
// eval); the conv blocks' apply_norm_act runs it for their batch norms; and (on a CUDA build with a
// GPU) the fused kernels match a float64 reference in the output, every gradient and the updated
// running statistics, channels-last and NCDHW (one sample, one channel, several of each), and are
// not used on the CPU or in eval.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "kernel_test_support.h"
#include "voxfit/kernels/instance_norm_act.h"
#include "voxfit/models/blocks/layers.h"

namespace voxfit::kernels {
namespace {

namespace nn = torch::nn;
using test::cuda_here;
using test::relative_error;
using test::tolerance;

RunningStats stats_of(nn::BatchNorm3d& bn, double momentum) {
  RunningStats r;
  r.mean = bn->running_mean;
  r.var = bn->running_var;
  r.momentum = momentum;
  return r;
}

TEST(BatchNormAct, ReferenceEqualsTheModuleAndItsActivation) {
  torch::manual_seed(5);
  nn::BatchNorm3d module(nn::BatchNorm3dOptions(3));
  nn::BatchNorm3d ours(nn::BatchNorm3dOptions(3));
  {
    torch::NoGradGuard no_grad;
    module->weight.uniform_(0.5, 1.5);
    module->bias.uniform_(-0.5, 0.5);
    ours->weight.copy_(module->weight);
    ours->bias.copy_(module->bias);
  }
  NormActSpec spec;
  spec.act = Activation::kReLU;
  for (const bool training : {true, true, false}) {
    module->train(training);
    const auto x = torch::randn({2, 3, 4, 5, 6}) * 3 + 1, r = torch::randn({2, 3, 4, 5, 6});
    const auto want = torch::relu(module(x) + r);
    const auto got = batch_norm_act(x, ours->weight, ours->bias, stats_of(ours, 0.1), training, r, spec);
    EXPECT_TRUE(torch::allclose(got, want, 1e-6, 1e-6)) << "training " << training;
    EXPECT_TRUE(torch::allclose(ours->running_mean, module->running_mean)) << training;
    EXPECT_TRUE(torch::allclose(ours->running_var, module->running_var)) << training;
  }
  EXPECT_FALSE(torch::allclose(ours->running_var, torch::ones({3})));  // the training steps moved them
}

// The conv blocks' norm + activation on a BatchNorm3d module does what the module's own forward
// and the activation did: the same output, running statistics and batches counted, with a
// momentum and with the cumulative average (no momentum), in training and in eval.
TEST(BatchNormAct, ConvBlocksNormActRunsTheModulesForward) {
  torch::manual_seed(6);
  for (const bool cumulative : {false, true}) {
    auto options = nn::BatchNorm3dOptions(4);
    if (cumulative) options.momentum(std::nullopt);
    nn::BatchNorm3d module(options), ours(options);
    nn::AnyModule any(ours);
    for (const bool training : {true, true, true, false}) {
      module->train(training);
      ours->train(training);
      const auto x = torch::randn({3, 4, 3, 5, 4}) * 2 - 1;
      const auto want = torch::leaky_relu(module(x), 0.01);
      const auto got = models::apply_norm_act(any, "leakyrelu", x, {});
      EXPECT_TRUE(torch::allclose(got, want, 1e-6, 1e-6)) << cumulative << training;
      EXPECT_TRUE(torch::allclose(ours->running_mean, module->running_mean, 1e-6, 1e-7)) << cumulative;
      EXPECT_TRUE(torch::allclose(ours->running_var, module->running_var, 1e-6, 1e-7)) << cumulative;
      EXPECT_EQ(ours->num_batches_tracked.item<int64_t>(), module->num_batches_tracked.item<int64_t>());
    }
    EXPECT_EQ(ours->num_batches_tracked.item<int64_t>(), 3);
  }
}

TEST(BatchNormAct, NeverFusesCpuTensorsNorEval) {
  KernelModeGuard fused(KernelMode::kFused);
  nn::BatchNorm3d bn(nn::BatchNorm3dOptions(4));
  EXPECT_FALSE(fused_batch_norm_applies(torch::randn({2, 4, 8, 8, 8}), bn->weight, {}, stats_of(bn, 0.1), true));
  if (!cuda_here()) GTEST_SKIP() << "no CUDA in this build or machine: the CUDA layouts are not checked";
  bn->to(torch::kCUDA);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const auto cl = torch::randn({2, 4, 8, 8, 8}, cuda).contiguous(c10::MemoryFormat::ChannelsLast3d);
  const auto running = stats_of(bn, 0.1);
  EXPECT_TRUE(fused_batch_norm_applies(cl, bn->weight, {}, running, true));
  EXPECT_FALSE(fused_batch_norm_applies(cl, bn->weight, {}, running, false));        // eval: running statistics
  EXPECT_TRUE(fused_batch_norm_applies(cl, bn->weight, {}, RunningStats{}, false));  // none tracked: batch's
  EXPECT_TRUE(fused_batch_norm_applies(torch::randn({1, 4, 8, 8, 8}, cuda), bn->weight, {}, running, true));
  EXPECT_TRUE(fused_batch_norm_applies(torch::randn({2, 4, 8, 8, 8}, cuda), bn->weight, {}, running, true));
  // Neither layout (a permuted view): ATen's.
  EXPECT_FALSE(fused_batch_norm_applies(torch::randn({2, 8, 8, 8, 4}, cuda).permute({0, 4, 1, 3, 2}), bn->weight, {},
                                        running, true));
  KernelModeGuard aten(KernelMode::kAten);
  EXPECT_FALSE(fused_batch_norm_applies(cl, bn->weight, {}, running, true));
}

struct BnCase {
  std::vector<int64_t> shape;
  bool channels_last;
  torch::ScalarType dtype;
  Activation act;
  bool residual;
};

std::string describe_bn(const BnCase& c) {
  std::string s = "shape";
  for (const auto v : c.shape) s += " " + std::to_string(v);
  return s + (c.channels_last ? " channels-last" : " ncdhw") + " " + std::string(c10::toString(c.dtype)) + " act " +
         std::to_string(static_cast<int>(c.act)) + (c.residual ? " residual" : "");
}

struct BnOutputs {
  torch::Tensor y, dx, dw, db, dr, running_mean, running_var;
};

BnOutputs run_bn(const BnCase& c, const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& b0,
                 const torch::Tensor& r0, const torch::Tensor& g0, torch::ScalarType dtype, bool fused) {
  KernelModeGuard mode(fused ? KernelMode::kFused : KernelMode::kAten);
  const auto format = c.channels_last ? c10::MemoryFormat::ChannelsLast3d : c10::MemoryFormat::Contiguous;
  const auto param = dtype == torch::kDouble ? torch::kDouble : torch::kFloat;
  auto x = x0.to(dtype).contiguous(format).detach().requires_grad_(true);
  auto w = w0.to(param).detach().requires_grad_(true), b = b0.to(param).detach().requires_grad_(true);
  torch::Tensor r;
  if (c.residual) r = r0.to(dtype).contiguous(format).detach().requires_grad_(true);
  RunningStats running;
  running.mean = torch::full({c.shape[1]}, 0.5, w.options().requires_grad(false));
  running.var = torch::full({c.shape[1]}, 2.0, w.options().requires_grad(false));
  running.momentum = 0.3;
  NormActSpec spec;
  spec.act = c.act;
  if (fused) {
    EXPECT_TRUE(fused_batch_norm_applies(x, w, r, running, true)) << describe_bn(c);
  }
  auto y = batch_norm_act(x, w, b, running, true, r, spec);
  (y.to(torch::kDouble) * g0).sum().backward();
  BnOutputs o;
  o.y = y.detach();
  o.dx = x.grad();
  o.dw = w.grad();
  o.db = b.grad();
  if (c.residual) o.dr = r.grad();
  o.running_mean = running.mean.to(torch::kDouble);
  o.running_var = running.var.to(torch::kDouble);
  return o;
}

TEST(BatchNormActCuda, FusedMatchesFloat64ReferenceInOutputGradientsAndRunningStatistics) {
  if (!cuda_here()) GTEST_SKIP() << "no CUDA in this build or machine";
  // Channels-last with several samples and channels (one and more tiles of 32 channels); NCDHW
  // with one sample, one channel, and several of each (each sample's plane of a channel in chunks).
  std::vector<BnCase> cases;
  for (const auto& [shape, cl] : std::vector<std::pair<std::vector<int64_t>, bool>>{{{2, 3, 5, 7, 9}, true},
                                                                                    {{3, 40, 6, 5, 7}, true},
                                                                                    {{1, 16, 12, 12, 12}, false},
                                                                                    {{3, 1, 9, 4, 3}, false},
                                                                                    {{2, 5, 24, 20, 22}, false}})
    for (const auto dtype : {torch::kFloat, torch::kHalf, torch::kBFloat16})
      for (const auto act : {Activation::kNone, Activation::kReLU, Activation::kLeakyReLU})
        for (const bool residual : {false, true}) cases.push_back({shape, cl, dtype, act, residual});
  int checked = 0;
  for (const auto& c : cases) {
    torch::manual_seed(checked);
    const auto opts = torch::TensorOptions().dtype(torch::kDouble).device(torch::kCUDA);
    const auto x = torch::randn(c.shape, opts) * 2 + 5;  // a mean far from zero: the shifted sums
    const auto w = torch::rand({c.shape[1]}, opts) + 0.5, b = torch::randn({c.shape[1]}, opts);
    const auto r = torch::randn(c.shape, opts), g = torch::randn(c.shape, opts);
    const auto xr = x.to(c.dtype).to(torch::kDouble), rr = r.to(c.dtype).to(torch::kDouble);
    const auto want = run_bn(c, xr, w, b, rr, g, torch::kDouble, false);
    const auto got = run_bn(c, x, w, b, r, g, c.dtype, true);
    const double tol = tolerance(c.dtype);
    EXPECT_LT(relative_error(got.y, want.y), tol) << "y, " << describe_bn(c);
    EXPECT_LT(relative_error(got.dx, want.dx), tol) << "dx, " << describe_bn(c);
    EXPECT_LT(relative_error(got.dw, want.dw), tol) << "dweight, " << describe_bn(c);
    EXPECT_LT(relative_error(got.db, want.db), tol) << "dbias, " << describe_bn(c);
    if (c.residual) {
      EXPECT_LT(relative_error(got.dr, want.dr), tol) << "dresidual, " << describe_bn(c);
    }
    // The statistics are float32 sums of the stored (rounded) input: float's tolerance, at most 1e-4.
    EXPECT_LT(relative_error(got.running_mean, want.running_mean), 1e-4) << "running mean, " << describe_bn(c);
    EXPECT_LT(relative_error(got.running_var, want.running_var), 1e-4) << "running var, " << describe_bn(c);
    EXPECT_EQ(got.y.strides(), got.dx.strides()) << describe_bn(c);
    ++checked;
  }
  EXPECT_EQ(checked, 5 * 3 * 3 * 2);
}

}  // namespace
}  // namespace voxfit::kernels
