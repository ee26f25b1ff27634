// What training relies on: every parameter gets a gradient, checkpointing changes no gradient
// bit, the math and sdpa attention paths agree, channels-last changes only the layout.
#include <algorithm>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model_test_support.h"
#include "voxfit/core/torch_compat.h"
#include "voxfit/kernels/instance_norm_act.h"
#include "voxfit/kernels/layer_norm.h"
#include "voxfit/models/attention.h"
#include "voxfit/models/blocks/layers.h"
#include "voxfit/models/checkpoint.h"
#include "voxfit/models/nets/vit.h"
#include "voxfit/models/network.h"

namespace voxfit::models {
namespace {

class PerNetwork : public ::testing::TestWithParam<test::SmallNet> {};

std::string label(const ::testing::TestParamInfo<test::SmallNet>& info) { return info.param.model; }

// Gradients of one training step (on the CPU), by parameter name, for a net built from seed 0 and
// run on `device` in the layout `channels_last`. Under `--kernels aten` (the reference) unless
// `kernels` says otherwise.
std::map<std::string, torch::Tensor> step_gradients(const test::SmallNet& small, CheckpointMode mode,
                                                    AttentionMode attention = AttentionMode::kMath,
                                                    kernels::KernelMode kernels = kernels::KernelMode::kAten,
                                                    const torch::Device& device = torch::kCPU,
                                                    bool channels_last = false) {
  const kernels::KernelModeGuard guard(kernels);
  ModelContext ctx = test::context_of(small);
  ctx.checkpoint = mode;
  ctx.attention = attention;
  ctx.channels_last = channels_last;
  torch::manual_seed(0);
  const Network net = make_model(small.model, ctx);
  {
    // A residual branch's last norm initialised to zero (ResNet's zero_init_last, nnU-Net's ResEnc
    // init) leaves the branch without gradient at the first step: such weights start at one here.
    torch::NoGradGuard no_grad;
    for (auto& p : net->named_parameters())
      if (p.value().dim() == 1 && p.key().size() > 6 && p.key().compare(p.key().size() - 6, 6, "weight") == 0 &&
          p.value().abs().sum().item<double>() == 0.0)
        p.value().fill_(1.0);
  }
  net->to(device);
  net->train(true);
  torch::manual_seed(1);
  const auto input = torch::randn(test::input_shape(small, 1)).to(device);
  test::weighted_sum(net->forward(input)).backward();
  std::map<std::string, torch::Tensor> grads;
  for (const auto& p : net->named_parameters())
    grads[p.key()] = p.value().grad().defined() ? p.value().grad().cpu() : torch::Tensor();
  return grads;
}

// fused and reference gradients agree to `rtol` (and an absolute floor of `floor` times the
// largest reference gradient); the fused path leaves out only biases whose reference gradient is
// zero (below 1e-5 of the largest). Returns how many it left out.
int expect_fused_matches_reference(const std::map<std::string, torch::Tensor>& reference,
                                   const std::map<std::string, torch::Tensor>& fused, double rtol, double floor) {
  EXPECT_EQ(fused.size(), reference.size());
  double largest = 0;
  for (const auto& [name, g] : reference) largest = std::max(largest, g.abs().max().item<double>());
  int left_out = 0;
  for (const auto& [name, g] : reference) {
    const auto& f = fused.at(name);
    if (!f.defined()) {
      ++left_out;
      EXPECT_NE(name.find(".bias"), std::string::npos) << name << ": only biases may be left out";
      EXPECT_LT(g.abs().max().item<double>(), 1e-5 * largest) << name << ": its reference gradient is not zero";
      continue;
    }
    EXPECT_TRUE(torch::allclose(f, g, rtol, floor * largest))
        << name << " differs by up to " << (f - g).abs().max().item<double>() << " (largest gradient " << largest
        << ")";
  }
  return left_out;
}

TEST_P(PerNetwork, EveryParameterReceivesAGradient) {
  const auto grads = step_gradients(GetParam(), CheckpointMode::kNone);
  ASSERT_FALSE(grads.empty());
  for (const auto& [name, g] : grads) {
    ASSERT_TRUE(g.defined()) << name << " has no gradient";
    EXPECT_TRUE(torch::isfinite(g).all().item<bool>()) << name;
    EXPECT_GT(g.abs().sum().item<double>(), 0.0) << name << " has an all-zero gradient";
  }
}

// `--kernels fused` (also on the CPU) leaves out the convolution biases that an instance norm
// cancels (models::norm_cancels_conv_bias): those get no gradient, and their reference gradient
// is zero up to rounding; every other gradient is the reference's.
TEST_P(PerNetwork, FusedModeLeavesOutOnlyCancelledBiases) {
  const auto reference = step_gradients(GetParam(), CheckpointMode::kNone);
  const auto fused =
      step_gradients(GetParam(), CheckpointMode::kNone, AttentionMode::kMath, kernels::KernelMode::kFused);
  const int left_out = expect_fused_matches_reference(reference, fused, 1e-3, 1e-5);
  // nnU-Net's conv stacks (bias then instance norm) are the only ones with such biases.
  if (GetParam().cancelled_biases)
    EXPECT_GT(left_out, 0);
  else
    EXPECT_EQ(left_out, 0);
}

// The same on a GPU, fp32 without TF32: the fused CUDA norms, SwinUNETR's gathers and the biases
// left out, in the layout `--channels-last auto` picks on CUDA (channels-last for unet3d), against
// the ATen reference in NCDHW. The fused norms sum in another order: a looser tolerance.
TEST_P(PerNetwork, CudaFusedModeMatchesTheReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  const torch::Device cuda(torch::kCUDA, 0);
  auto& context = at::globalContext();
  const bool tf32_cudnn = context.allowTF32CuDNN(), tf32_matmul = context.allowTF32CuBLAS();
  context.setAllowTF32CuDNN(false);
  context.setAllowTF32CuBLAS(false);
  const bool cl = resolve_channels_last(find_model(GetParam().model), std::nullopt, cuda);
  const auto reference =
      step_gradients(GetParam(), CheckpointMode::kNone, AttentionMode::kMath, kernels::KernelMode::kAten, cuda);
  const auto fused =
      step_gradients(GetParam(), CheckpointMode::kNone, AttentionMode::kMath, kernels::KernelMode::kFused, cuda, cl);
  context.setAllowTF32CuDNN(tf32_cudnn);
  context.setAllowTF32CuBLAS(tf32_matmul);
  expect_fused_matches_reference(reference, fused, 1e-2, 1e-4);
}

TEST_P(PerNetwork, CheckpointingGivesBitwiseIdenticalGradients) {
  const auto plain = step_gradients(GetParam(), CheckpointMode::kNone);
  for (const auto mode : {CheckpointMode::kBlocks, CheckpointMode::kAll}) {
    const auto checkpointed = step_gradients(GetParam(), mode);
    ASSERT_EQ(checkpointed.size(), plain.size());
    for (const auto& [name, g] : plain) {
      const auto& c = checkpointed.at(name);
      ASSERT_TRUE(c.defined()) << to_string(mode) << ": " << name << " has no gradient";
      EXPECT_TRUE(torch::equal(g, c)) << to_string(mode) << ": " << name << " differs by up to "
                                      << (g - c).abs().max().item<double>();
    }
  }
}

TEST_P(PerNetwork, ChannelsLastChangesOnlyTheLayout) {
  const test::SmallNet& small = GetParam();
  ModelContext ctx = test::context_of(small);
  torch::manual_seed(0);
  const Network plain = make_model(small.model, ctx);
  ctx.channels_last = true;
  torch::manual_seed(0);
  const Network cl = make_model(small.model, ctx);
  const auto format = ctx.patch.size() == 3 ? c10::MemoryFormat::ChannelsLast3d : c10::MemoryFormat::ChannelsLast;
  // Every conv weight whose layouts differ (not MedNeXt's depthwise and 1x1x1 ones).
  for (const auto& p : cl->parameters())
    if (p.dim() == static_cast<int64_t>(ctx.patch.size()) + 2 && p.size(1) > 1 && p.size(2) * p.size(3) > 1)
      EXPECT_TRUE(p.is_contiguous(format));
  plain->eval();
  cl->eval();
  torch::NoGradGuard no_grad;
  const auto input = torch::randn(test::input_shape(small, 1));
  const auto a = plain->forward(input)[0], b = cl->forward(input)[0];
  EXPECT_TRUE(torch::allclose(a, b, 1e-4, 1e-4)) << (a - b).abs().max().item<double>();
}

TEST_P(PerNetwork, MathAndSdpaAttentionAgree) {
  const test::SmallNet& small = GetParam();
  if (small.model == "unet3d" || small.model == "resnet50") GTEST_SKIP() << "no attention in " << small.model;
  ModelContext ctx = test::context_of(small);
  const auto input = torch::randn(test::input_shape(small, 1));
  std::vector<torch::Tensor> outs;
  for (const auto mode : {AttentionMode::kMath, AttentionMode::kSdpa}) {
    ctx.attention = mode;
    torch::manual_seed(0);
    const Network net = make_model(small.model, ctx);
    net->eval();
    torch::NoGradGuard no_grad;
    outs.push_back(net->forward(input)[0]);
  }
  EXPECT_TRUE(torch::allclose(outs[0], outs[1], 1e-4, 1e-5)) << (outs[0] - outs[1]).abs().max().item<double>();
  const auto g_math = step_gradients(small, CheckpointMode::kNone, AttentionMode::kMath);
  const auto g_sdpa = step_gradients(small, CheckpointMode::kNone, AttentionMode::kSdpa);
  // Per tensor, the error relative to the gradient's norm: elementwise tolerances fail on the
  // conv weights' sums over many voxels, where the two kernels' rounding (fp32, different
  // summation order) lands on gradients that nearly cancel: on LibTorch 2.11's CPU flash kernel
  // UNETR's 1x1x1 input projection differs by 0.5% of its norm. A wrong scale, mask or layout
  // gives O(1).
  for (const auto& [name, g] : g_math) {
    const double error = (g - g_sdpa.at(name)).norm().item<double>() / (g.norm().item<double>() + 1e-12);
    EXPECT_LT(error, 2e-2) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Small, PerNetwork, ::testing::ValuesIn(test::small_nets()), label);

TEST(Attention, MathAndSdpaAgreeWithBiasAndMask) {
  torch::manual_seed(0);
  // Swin layout: [B, windows, heads, n, d] with a per-head bias and a per-window mask.
  const auto q = torch::randn({2, 3, 4, 10, 8}, torch::requires_grad());
  const auto k = torch::randn({2, 3, 4, 10, 8}), v = torch::randn({2, 3, 4, 10, 8});
  // 10 keys: not a multiple of 8, so the sdpa path pads the mask's rows (aligned_rows).
  const auto bias = torch::randn({4, 10, 10}, torch::requires_grad());
  const auto mask = torch::where(torch::rand({3, 1, 10, 10}) > 0.5, torch::full({}, -100.0f), torch::zeros({}));
  const auto math = attention(q, k, v, bias, mask, AttentionMode::kMath);
  const auto sdpa = attention(q, k, v, bias, mask, AttentionMode::kSdpa);
  ASSERT_EQ(math.sizes(), q.sizes());
  EXPECT_TRUE(torch::allclose(math, sdpa, 1e-5, 1e-5)) << (math - sdpa).abs().max().item<double>();
  const auto w = torch::randn(q.sizes());  // a loss whose gradient differs per element
  const auto gm = torch::autograd::grad({(math * w).sum()}, {q, bias});
  const auto gs = torch::autograd::grad({(sdpa * w).sum()}, {q, bias});
  EXPECT_TRUE(torch::allclose(gm[0], gs[0], 1e-4, 1e-5));
  EXPECT_TRUE(torch::allclose(gm[1], gs[1], 1e-4, 1e-5)) << (gm[1] - gs[1]).abs().max().item<double>();

  // Explicit softmax(q k^T / sqrt(d)) v for one window and head.
  const auto s = torch::matmul(q[1][2][3], k[1][2][3].t()) / std::sqrt(8.0) + bias[3] + mask[2][0];
  EXPECT_TRUE(torch::allclose(math[1][2][3], torch::matmul(s.softmax(-1), v[1][2][3]), 1e-5, 1e-6));
}

// The fused kernel itself (memory-efficient attention, fp16) on a Swin-shaped shifted window: 27
// tokens, 3 heads of 16, a learned bias and a window mask; against the math path in fp32.
TEST(Attention, CudaHalfSdpaMatchesMathWithBiasAndMask) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  torch::manual_seed(0);
  const auto dev = torch::Device(torch::kCUDA);
  const auto q = torch::randn({2, 5, 3, 27, 16}, dev), k = torch::randn_like(q), v = torch::randn_like(q);
  const auto bias = torch::randn({3, 27, 27}, dev).requires_grad_();
  const auto mask =
      torch::where(torch::rand({5, 1, 27, 27}, dev) > 0.5, torch::full({}, -100.0f, dev), torch::zeros({}, dev));
  const auto w = torch::randn_like(q);
  const auto qh = q.to(torch::kHalf).requires_grad_();
  const auto fused = attention(qh, k.to(torch::kHalf), v.to(torch::kHalf), bias, mask, AttentionMode::kSdpa);
  ASSERT_EQ(fused.scalar_type(), torch::kHalf);
  const auto g = torch::autograd::grad({(fused.to(torch::kFloat) * w).sum()}, {qh, bias});
  const auto qf = qh.detach().to(torch::kFloat).requires_grad_();
  const auto kf = k.to(torch::kHalf).to(torch::kFloat), vf = v.to(torch::kHalf).to(torch::kFloat);
  const auto ref = attention(qf, kf, vf, bias, mask, AttentionMode::kMath);
  const auto gr = torch::autograd::grad({(ref * w).sum()}, {qf, bias});
  EXPECT_TRUE(torch::allclose(fused.to(torch::kFloat), ref, 1e-2, 1e-2))
      << (fused.to(torch::kFloat) - ref).abs().max().item<double>();
  EXPECT_TRUE(torch::allclose(g[0].to(torch::kFloat), gr[0], 3e-2, 3e-2))
      << (g[0].to(torch::kFloat) - gr[0]).abs().max().item<double>();
  const double bias_error = (g[1] - gr[1]).norm().item<double>() / gr[1].norm().item<double>();
  EXPECT_LT(bias_error, 1e-2);
}

TEST(Attention, SdpaAgreesWithoutGradAndWithoutMask) {
  torch::manual_seed(0);
  const auto q = torch::randn({2, 4, 7, 16}), k = torch::randn({2, 4, 9, 16}), v = torch::randn({2, 4, 9, 16});
  torch::NoGradGuard no_grad;
  const auto math = attention(q, k, v, {}, {}, AttentionMode::kMath);
  EXPECT_TRUE(torch::allclose(math, attention(q, k, v, {}, {}, AttentionMode::kSdpa), 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(math, attention(q, k, v, {}, {}, AttentionMode::kAuto), 1e-5, 1e-6));
}

TEST(Checkpoint, ParametersGetGradientsWhenNoInputRequiresGrad) {
  torch::manual_seed(0);
  const auto w = torch::randn({5, 5}, torch::requires_grad());
  const auto x = torch::randn({3, 5});
  const auto f = [w](const torch::Tensor& in) { return torch::tanh(torch::matmul(in, w)).pow(2); };
  f(x).sum().backward();
  const auto expected = w.grad().clone();
  w.mutable_grad().zero_();
  checkpoint(f, x).sum().backward();
  EXPECT_TRUE(torch::equal(w.grad(), expected));
}

TEST(Checkpoint, InputGradientsAndSeveralOutputs) {
  torch::manual_seed(0);
  const auto a = torch::randn({4, 4}, torch::requires_grad());
  const auto b = torch::randn({4, 4}, torch::requires_grad());
  const BlockFn f = [](const std::vector<torch::Tensor>& in) -> std::vector<torch::Tensor> {
    return {torch::sin(in[0]) * in[1], in[0].exp()};
  };
  auto plain = f({a, b});
  const auto ga = torch::autograd::grad({plain[0].sum() + plain[1].mean()}, {a, b});
  auto ck = checkpoint(f, {a, b});
  EXPECT_TRUE(ck[0].requires_grad());
  const auto gc = torch::autograd::grad({ck[0].sum() + ck[1].mean()}, {a, b});
  EXPECT_TRUE(torch::equal(ga[0], gc[0]));
  EXPECT_TRUE(torch::equal(ga[1], gc[1]));
}

TEST(Checkpoint, RecomputationSeesTheForwardsAutocastState) {
  const auto w = torch::randn({8, 8}, torch::requires_grad());
  std::vector<at::ScalarType> seen;
  const auto f = [w, &seen](const torch::Tensor& in) {
    auto y = torch::mm(in, w);
    seen.push_back(y.scalar_type());
    return y.to(torch::kFloat);
  };
  torch::Tensor out;
  {
    compat::AutocastScope autocast(c10::DeviceType::CPU, true, at::kBFloat16);
    out = checkpoint(f, torch::randn({4, 8}));
  }
  out.sum().backward();  // outside the autocast scope
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], at::kBFloat16);
  EXPECT_EQ(seen[1], at::kBFloat16);
  EXPECT_FALSE(compat::autocast_enabled(c10::DeviceType::CPU));
}

TEST(Checkpoint, NoRecomputationOutsideTraining) {
  int calls = 0;
  const auto f = [&calls](const torch::Tensor& in) {
    ++calls;
    return in * 2;
  };
  const auto x = torch::randn({3}, torch::requires_grad());
  maybe_checkpoint(true, /*training=*/false, f, x).sum().backward();
  EXPECT_EQ(calls, 1);
  maybe_checkpoint(true, /*training=*/true, f, x).sum().backward();
  EXPECT_EQ(calls, 3);
}

// The patch embedding as one matrix product (`--kernels fused`) gives the convolution's tokens in
// its order, and the same gradients for the input, the weight and the bias, in 2D and 3D, with
// several channels and patch sizes that differ per axis.
TEST(PatchTokens, EqualTheConvolutionsTokensAndGradients) {
  torch::manual_seed(4);
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  struct Case {
    std::vector<int64_t> x, w;
  };
  for (const auto& c : std::vector<Case>{{{2, 3, 8, 12}, {5, 3, 4, 4}},
                                         {{2, 2, 4, 8, 12}, {6, 2, 2, 4, 4}},
                                         {{1, 1, 16, 16, 16}, {7, 1, 16, 16, 16}}}) {
    SCOPED_TRACE(c10::str(c.x));
    const auto x = torch::randn(c.x, f64).requires_grad_(true);
    const auto w = torch::randn(c.w, f64).requires_grad_(true);
    const auto b = torch::randn({c.w[0]}, f64).requires_grad_(true);
    const std::vector<int64_t> stride(c.w.begin() + 2, c.w.end());
    const auto conv = c.x.size() == 4 ? torch::conv2d(x, w, b, stride) : torch::conv3d(x, w, b, stride);
    const auto expected = conv.flatten(2).transpose(1, 2);
    const auto got = patch_tokens(x, w, b);
    ASSERT_EQ(got.sizes(), expected.sizes());
    EXPECT_TRUE(torch::allclose(got, expected, 1e-12, 1e-12)) << (got - expected).abs().max().item<double>();
    const auto dy = torch::randn(expected.sizes(), f64);
    const auto want = torch::autograd::grad({expected}, {x, w, b}, {dy});
    const auto have = torch::autograd::grad({got}, {x, w, b}, {dy});
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(torch::allclose(have[i], want[i], 1e-12, 1e-12)) << "gradient " << i;
  }
  EXPECT_THROW(patch_tokens(torch::randn({1, 1, 10, 16}), torch::randn({4, 1, 4, 4}), {}), c10::Error);
}

// pointwise_conv (MedNeXt's 1x1x1 convolutions under --kernels fused) gives the convolution's output
// in the input's layout and the same gradients, NCDHW (a product per sample) and channels-last (one
// product over the voxels, the bias in it), in 2D and 3D, with and without a bias.
TEST(PointwiseConv, EqualsTheConvolutionInBothLayoutsWithItsGradients) {
  torch::manual_seed(5);
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  for (const auto& shape : std::vector<std::vector<int64_t>>{{2, 3, 5, 6}, {3, 4, 5, 6, 7}, {1, 1, 2, 3, 4}})
    for (const bool channels_last : {false, true})
      for (const bool with_bias : {false, true}) {
        SCOPED_TRACE(c10::str(shape, " channels-last ", channels_last, " bias ", with_bias));
        const auto format = shape.size() == 5 ? c10::MemoryFormat::ChannelsLast3d : c10::MemoryFormat::ChannelsLast;
        auto x = torch::randn(shape, f64);
        if (channels_last) x = x.contiguous(format);
        x.requires_grad_(true);
        std::vector<int64_t> wshape(shape.size(), 1);
        wshape[0] = 6, wshape[1] = shape[1];
        const auto w = torch::randn(wshape, f64).requires_grad_(true);
        const auto b = with_bias ? torch::randn({6}, f64).requires_grad_(true) : torch::Tensor();
        const auto expected = shape.size() == 4 ? torch::conv2d(x, w, b) : torch::conv3d(x, w, b);
        const auto got = pointwise_conv(x, w, b);
        ASSERT_EQ(got.sizes(), expected.sizes());
        EXPECT_TRUE(torch::allclose(got, expected, 1e-12, 1e-12)) << (got - expected).abs().max().item<double>();
        if (channels_last && shape[1] > 1) {
          EXPECT_TRUE(got.is_contiguous(format));
        } else {
          EXPECT_TRUE(got.is_contiguous());
        }
        const auto dy = torch::randn(expected.sizes(), f64);
        std::vector<torch::Tensor> inputs{x, w};
        if (with_bias) inputs.push_back(b);
        const auto want = torch::autograd::grad({expected}, inputs, {dy});
        const auto have = torch::autograd::grad({got}, inputs, {dy});
        for (size_t i = 0; i < want.size(); ++i)
          EXPECT_TRUE(torch::allclose(have[i], want[i], 1e-12, 1e-12)) << "gradient " << i;
      }
  EXPECT_THROW(pointwise_conv(torch::randn({1, 2, 4, 4}), torch::randn({3, 2, 3, 3}), {}), c10::Error);
}

// On a GPU, under fp16 autocast as MedNeXt trains (apply_pointwise in the default --kernels fused):
// a half result of the convolution's value (float64 reference), in both layouts.
TEST(PointwiseConv, CudaHalfUnderAutocastMatchesTheConvolution) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  torch::manual_seed(6);
  torch::nn::Conv3d conv(torch::nn::Conv3dOptions(16, 32, 1));
  conv->to(torch::kCUDA);
  for (const bool channels_last : {false, true}) {
    auto x = torch::randn({2, 16, 12, 10, 8}, torch::kCUDA);
    if (channels_last) x = x.contiguous(c10::MemoryFormat::ChannelsLast3d);
    const auto want =
        torch::conv3d(x.to(torch::kDouble), conv->weight.to(torch::kDouble), conv->bias.to(torch::kDouble));
    compat::set_autocast(torch::kCUDA, true, torch::kHalf);
    const auto got = apply_pointwise(conv, x);
    compat::set_autocast(torch::kCUDA, false, torch::kHalf);
    at::autocast::clear_cache();
    EXPECT_EQ(got.scalar_type(), torch::kHalf);
    const double error = (got.to(torch::kDouble) - want).abs().max().item<double>() / want.abs().max().item<double>();
    EXPECT_LT(error, 2e-3) << "channels-last " << channels_last;
  }
}

}  // namespace
}  // namespace voxfit::models

namespace voxfit::models {
namespace {

// BatchNorm folded into the convolutions (inference) computes what the modules compute in eval
// mode; training forwards ignore the fold. The statistics are made non-trivial first (a freshly
// built network has mean 0, var 1 and zero-initialised last BatchNorms).
TEST(FoldForInference, ResNetEvalOutputIsUnchangedAndTrainingIgnoresIt) {
  torch::manual_seed(0);
  const Network net = make_model("resnet50", [] {
    auto ctx = find_model("resnet50").defaults;
    ctx.params = {{"blocks_per_stage", "1,2,1,1"}, {"zero_init_last", "false"}};
    ctx.num_classes = 10;
    return ctx;
  }());
  {
    torch::NoGradGuard no_grad;
    for (const auto& b : net->named_buffers()) {
      if (b.key().find("running_mean") != std::string::npos) b.value().normal_(0.0, 0.5);
      if (b.key().find("running_var") != std::string::npos) b.value().uniform_(0.5, 2.0);
    }
    for (const auto& p : net->named_parameters())
      if (p.key().find("bn") != std::string::npos && p.key().find("bias") != std::string::npos)
        p.value().normal_(0.0, 0.3);
  }
  const auto x = torch::randn({2, 3, 64, 64});
  net->eval();
  torch::NoGradGuard no_grad;
  const auto reference = net->forward(x).at(0);
  ASSERT_TRUE(net->fold_for_inference());
  const auto folded = net->forward(x).at(0);
  EXPECT_TRUE(torch::allclose(folded, reference, 1e-4, 1e-4)) << (folded - reference).abs().max().item<double>();
  net->train();
  const auto train_once = net->forward(x).at(0);
  EXPECT_FALSE(torch::allclose(train_once, folded, 1e-3, 1e-3));  // batch statistics, not the fold
}

TEST(FoldForInference, NetworksWithoutBatchNormHaveNothingToFold) {
  auto ctx = find_model("vit_base_patch16_224").defaults;
  ctx.params = {{"num_layers", "1"}, {"hidden_size", "64"}, {"mlp_dim", "128"}, {"num_heads", "2"}};
  EXPECT_FALSE(make_model("vit_base_patch16_224", ctx)->fold_for_inference());
}

// ViT's inference chains TransformerBlock::forward_parts, so that each block's last residual add
// runs in the next norm (kernels::add_layer_norm); a training step runs each block's forward. On
// the reference path the two are the same operations: the same bits. On a GPU, ViT-B's 768-wide
// half rows take the one-pass kernel, and the network's output matches the reference path's.
TEST(VitInference, ChainedBlocksGiveTheSameOutputAsBlockByBlock) {
  torch::manual_seed(3);
  VisionTransformer vit(
      VisionTransformerOptions().img_size({32, 32}).hidden_size(64).mlp_dim(128).num_heads(4).num_layers(3).num_classes(
          10));
  const auto x = torch::randn({2, 3, 32, 32});
  vit->train();
  const auto block_by_block = vit->forward(x)[0].detach();
  vit->eval();
  const torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(vit->forward(x)[0], block_by_block));
}

TEST(VitInference, CudaFusedAddNormMatchesTheReferenceInHalf) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  const torch::Device cuda(torch::kCUDA, 0);
  torch::manual_seed(4);
  VisionTransformer vit(VisionTransformerOptions().img_size({32, 32}).mlp_dim(512).num_layers(2).num_classes(10));
  vit->to(cuda, torch::kHalf);
  vit->eval();
  const torch::NoGradGuard no_grad;
  const auto x = torch::randn({4, 3, 32, 32}, torch::TensorOptions().device(cuda).dtype(torch::kHalf));
  {
    const kernels::KernelModeGuard fused(kernels::KernelMode::kFused);
    const auto rows = torch::zeros({4, 5, 768}, x.options());
    EXPECT_TRUE(kernels::fused_add_layer_norm_applies(rows, rows, torch::Tensor(), torch::Tensor()));
  }
  torch::Tensor out[2];
  for (const auto mode : {kernels::KernelMode::kAten, kernels::KernelMode::kFused}) {
    const kernels::KernelModeGuard guard(mode);
    out[mode == kernels::KernelMode::kFused ? 1 : 0] = vit->forward(x)[0].to(torch::kDouble);
  }
  const double scale = out[0].abs().max().item<double>();
  EXPECT_LT((out[1] - out[0]).abs().max().item<double>() / scale, 2e-2);
}

}  // namespace
}  // namespace voxfit::models
