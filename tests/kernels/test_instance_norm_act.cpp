// kernels::instance_norm_act: the ATen reference matches the modules the conv blocks used before,
// and (on a CUDA build with a GPU) the fused kernels match a float64 reference in the output and
// in every gradient, for both layouts, three dtypes, odd sizes, each activation, with and without
// affine parameters and a residual.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "kernel_test_support.h"
#include "voxfit/core/error.h"
#include "voxfit/core/torch_compat.h"
#include "voxfit/kernels/instance_norm_act.h"
#include "voxfit/memory/oom.h"
#include "voxfit/models/blocks/conv_blocks.h"
#include "voxfit/models/blocks/layers.h"

namespace voxfit::kernels {
namespace {

using test::cuda_here;
using test::relative_error;
using test::tolerance;

TEST(KernelMode, ParsesBothNamesAndRefusesOthers) {
  EXPECT_EQ(parse_kernel_mode("aten"), KernelMode::kAten);
  EXPECT_EQ(parse_kernel_mode("fused"), KernelMode::kFused);
  EXPECT_EQ(to_string(KernelMode::kAten), "aten");
  EXPECT_EQ(to_string(KernelMode::kFused), "fused");
  try {
    parse_kernel_mode("triton");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--kernels: expected aten or fused, got 'triton'"), std::string::npos);
  }
}

TEST(KernelMode, GuardRestoresTheModeItFound) {
  const KernelMode before = kernel_mode();
  {
    KernelModeGuard aten(KernelMode::kAten);
    EXPECT_EQ(kernel_mode(), KernelMode::kAten);
    {
      KernelModeGuard fused(KernelMode::kFused);
      EXPECT_EQ(kernel_mode(), KernelMode::kFused);
    }
    EXPECT_EQ(kernel_mode(), KernelMode::kAten);
  }
  EXPECT_EQ(kernel_mode(), before);
}

TEST(InstanceNormAct, NeverFusesCpuTensors) {
  KernelModeGuard fused(KernelMode::kFused);
  const auto x = torch::randn({2, 3, 4, 5, 6});
  EXPECT_FALSE(fused_instance_norm_applies(x, {}, {}));
}

// The reference is what the conv blocks ran before there was a dispatch: nn::InstanceNorm3d,
// the residual add, then the in-place activation module.
TEST(InstanceNormAct, ReferenceEqualsTheModulesItReplaces) {
  torch::manual_seed(3);
  for (const bool affine : {false, true}) {
    torch::nn::InstanceNorm3d norm(torch::nn::InstanceNorm3dOptions(3).affine(affine));
    if (affine) {
      torch::NoGradGuard no_grad;
      norm->weight.uniform_(0.5, 1.5);
      norm->bias.uniform_(-0.5, 0.5);
    }
    const auto x = torch::randn({2, 3, 5, 6, 7}) * 3 + 1;
    const auto r = torch::randn({2, 3, 5, 6, 7});
    torch::nn::LeakyReLU lrelu(torch::nn::LeakyReLUOptions().negative_slope(0.01).inplace(true));
    const auto expected = lrelu(norm(x) + r);
    NormActSpec spec;
    spec.act = Activation::kLeakyReLU;
    const auto got = instance_norm_act(x, norm->weight, norm->bias, r, spec);
    EXPECT_TRUE(torch::allclose(got, expected, 1e-6, 1e-6)) << "affine " << affine;
    spec.act = Activation::kReLU;
    EXPECT_TRUE(torch::allclose(instance_norm_act(x, norm->weight, norm->bias, {}, spec), torch::relu(norm(x))));
    spec.act = Activation::kNone;
    EXPECT_TRUE(torch::allclose(instance_norm_act(x, norm->weight, norm->bias, {}, spec), norm(x)));
  }
}

struct Case {
  std::vector<int64_t> shape;
  bool channels_last;
  torch::ScalarType dtype;
  Activation act;
  bool affine;
  bool residual;
};

std::string describe(const Case& c) {
  std::string s = "shape";
  for (const auto v : c.shape) s += " " + std::to_string(v);
  return s + (c.channels_last ? " channels-last" : " ncdhw") + " " + std::string(c10::toString(c.dtype)) + " act " +
         std::to_string(static_cast<int>(c.act)) + (c.affine ? " affine" : "") + (c.residual ? " residual" : "");
}

struct Outputs {
  torch::Tensor y, dx, dw, db, dr;
};

Outputs run(const Case& c, const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& b0,
            const torch::Tensor& r0, const torch::Tensor& g0, torch::ScalarType dtype, bool fused) {
  KernelModeGuard mode(fused ? KernelMode::kFused : KernelMode::kAten);
  const auto format = c.channels_last ? c10::MemoryFormat::ChannelsLast3d : c10::MemoryFormat::Contiguous;
  auto x = x0.to(dtype).contiguous(format).detach().requires_grad_(true);
  torch::Tensor w, b, r;
  if (c.affine) {
    w = w0.to(dtype == torch::kDouble ? torch::kDouble : torch::kFloat).detach().requires_grad_(true);
    b = b0.to(w.scalar_type()).detach().requires_grad_(true);
  }
  if (c.residual) r = r0.to(dtype).contiguous(format).detach().requires_grad_(true);
  NormActSpec spec;
  spec.act = c.act;
  if (fused) {
    EXPECT_TRUE(fused_instance_norm_applies(x, w, r)) << describe(c);
  }
  auto y = instance_norm_act(x, w, b, r, spec);
  (y.to(torch::kDouble) * g0).sum().backward();
  Outputs o;
  o.y = y.detach();
  o.dx = x.grad();
  if (c.affine) o.dw = w.grad(), o.db = b.grad();
  if (c.residual) o.dr = r.grad();
  return o;
}

TEST(InstanceNormActCuda, FusedMatchesFloat64ReferenceInOutputAndEveryGradient) {
  if (!cuda_here()) GTEST_SKIP() << "no CUDA in this build or machine";
  // Planes and channel counts of odd lengths (one element a load), and of multiples of 8 (16-byte
  // loads of half, 4 or 8 floats: rows of an NCDHW plane, channels of a channels-last row): a plane
  // over many chunks, and 264 channels (a tile of 256, then one of 8).
  const std::vector<std::vector<int64_t>> shapes = {{2, 3, 5, 7, 9}, {1, 16, 12, 12, 12}, {2, 40, 6, 5, 7},
                                                    {3, 1, 9, 4, 3}, {2, 2, 40, 40, 24},  {1, 264, 6, 5, 4}};
  std::vector<Case> cases;
  for (const auto& shape : shapes)
    for (const bool cl : {false, true})
      for (const auto dtype : {torch::kFloat, torch::kHalf, torch::kBFloat16})
        for (const auto act : {Activation::kNone, Activation::kReLU, Activation::kLeakyReLU})
          for (const bool affine : {false, true})
            for (const bool residual : {false, true}) cases.push_back({shape, cl, dtype, act, affine, residual});
  const torch::Device cuda(torch::kCUDA);
  int checked = 0;
  for (const auto& c : cases) {
    torch::manual_seed(checked);
    const auto opts = torch::TensorOptions().dtype(torch::kDouble).device(cuda);
    // A mean far from zero relative to the spread checks the shifted statistics.
    const auto x = torch::randn(c.shape, opts) * 2 + 5;
    const auto w = torch::rand({c.shape[1]}, opts) + 0.5, b = torch::randn({c.shape[1]}, opts);
    const auto r = torch::randn(c.shape, opts), g = torch::randn(c.shape, opts);
    // The reference sees the same rounded inputs as the fused run.
    const auto xr = x.to(c.dtype).to(torch::kDouble), rr = r.to(c.dtype).to(torch::kDouble);
    const auto want = run(c, xr, w, b, rr, g, torch::kDouble, false);
    const auto got = run(c, x, w, b, r, g, c.dtype, true);
    const double tol = tolerance(c.dtype);
    EXPECT_LT(relative_error(got.y, want.y), tol) << "y, " << describe(c);
    EXPECT_LT(relative_error(got.dx, want.dx), tol) << "dx, " << describe(c);
    if (c.affine) {
      EXPECT_LT(relative_error(got.dw, want.dw), tol) << "dweight, " << describe(c);
      EXPECT_LT(relative_error(got.db, want.db), tol) << "dbias, " << describe(c);
    }
    if (c.residual) {
      EXPECT_LT(relative_error(got.dr, want.dr), tol) << "dresidual, " << describe(c);
    }
    EXPECT_EQ(got.y.strides(), got.dx.strides()) << describe(c);
    ++checked;
  }
  EXPECT_EQ(checked, 6 * 2 * 3 * 3 * 2 * 2);
}

// A plane whose length allows 16-byte loads, in a tensor that starts one element past an aligned
// address (a view into a larger buffer): the element path both ways (ReLU keeps the input for
// backward), with the same result as an aligned copy.
TEST(InstanceNormActCuda, AMisalignedViewGivesTheSameResultAsAnAlignedCopy) {
  if (!cuda_here()) GTEST_SKIP() << "no CUDA in this build or machine";
  KernelModeGuard fused(KernelMode::kFused);
  const auto half = torch::TensorOptions().dtype(torch::kHalf).device(torch::kCUDA);
  const auto buffer = torch::randn({1 + 2 * 4 * 16 * 16 * 16}, half);
  const auto view = buffer.narrow(0, 1, 2 * 4 * 16 * 16 * 16).view({2, 4, 16, 16, 16});
  ASSERT_TRUE(view.is_contiguous());
  ASSERT_NE(reinterpret_cast<std::uintptr_t>(view.data_ptr()) % 16, 0u);
  const auto copy = view.clone();
  ASSERT_EQ(reinterpret_cast<std::uintptr_t>(copy.data_ptr()) % 16, 0u);
  NormActSpec spec;
  spec.act = Activation::kReLU;
  const auto a = view.detach().requires_grad_(), b = copy.detach().requires_grad_();
  const auto ya = instance_norm_act(a, {}, {}, {}, spec), yb = instance_norm_act(b, {}, {}, {}, spec);
  const auto g = torch::randn_like(copy);
  (ya * g).sum().backward();
  (yb * g).sum().backward();
  EXPECT_LT(relative_error(ya, yb.to(torch::kDouble)), 1e-3);
  EXPECT_LT(relative_error(a.grad(), b.grad().to(torch::kDouble)), 1e-3);
}

TEST(InstanceNormActCuda, SameInputGivesTheSameBits) {
  if (!cuda_here()) GTEST_SKIP() << "no CUDA in this build or machine";
  KernelModeGuard fused(KernelMode::kFused);
  const auto x = torch::randn({2, 16, 32, 32, 32}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kHalf));
  NormActSpec spec;
  spec.act = Activation::kLeakyReLU;
  EXPECT_TRUE(torch::equal(instance_norm_act(x, {}, {}, {}, spec), instance_norm_act(x, {}, {}, {}, spec)));
}

// Without affine parameters a residual norm keeps its output and the residual (kept anyway by
// whatever made it), not its input: dropping the caller's handle on the input frees it. With
// affine parameters the input stays. The gradients are checked against float64 above.
TEST(InstanceNormActCuda, ResidualNormWithoutAffineDoesNotKeepItsInput) {
  if (!cuda_here()) GTEST_SKIP() << "no CUDA in this build or machine";
  const torch::Device cuda(torch::kCUDA);
  const auto half = torch::TensorOptions().dtype(torch::kHalf).device(cuda);
  const int64_t bytes = 2 * 16 * 32 * 32 * 32 * 2;
  NormActSpec spec;
  spec.act = Activation::kLeakyReLU;
  for (const bool affine : {false, true}) {
    const auto a = torch::randn({2, 16, 32, 32, 32}, half).requires_grad_();
    const auto r = torch::randn({2, 16, 32, 32, 32}, half).requires_grad_();
    torch::Tensor w, b;
    if (affine)
      w = torch::ones({16}, half.dtype(torch::kFloat)).requires_grad_(), b = torch::zeros_like(w).requires_grad_();
    torch::cuda::synchronize();
    const auto before = static_cast<int64_t>(memory::current_allocated_bytes(cuda));
    auto x = a * 2;  // a fresh tensor: only the norm can keep it
    const auto y = instance_norm_act(x, w, b, r, spec);
    x = torch::Tensor();
    torch::cuda::synchronize();
    const auto kept = static_cast<int64_t>(memory::current_allocated_bytes(cuda)) - before;
    // y itself, and the per-instance statistics (a few KB).
    if (affine) {
      EXPECT_GE(kept, 2 * bytes) << "affine keeps its input";
    } else {
      EXPECT_LT(kept, bytes + bytes / 8) << "kept " << kept << " bytes beyond the inputs";
    }
    y.to(torch::kFloat).sum().backward();
    EXPECT_TRUE(a.grad().defined() && r.grad().defined());
  }
}

// A whole residual block (MONAI's UnetResBlock with a projection) in fp16 autocast: fused and
// ATen give the same output and parameter gradients within half-precision rounding.
TEST(InstanceNormActCuda, UnetBlockUnderAutocastMatchesTheAtenPath) {
  if (!cuda_here()) GTEST_SKIP() << "no CUDA in this build or machine";
  torch::manual_seed(0);
  for (const bool cl : {false, true}) {
    models::UnetBlock block(models::UnetBlockOptions(4, 8));
    block->to(torch::kCUDA);
    if (cl) models::to_channels_last(*block);
    auto x = torch::randn({2, 4, 20, 18, 16}, torch::kCUDA);
    if (cl) x = x.contiguous(c10::MemoryFormat::ChannelsLast3d);
    std::vector<torch::Tensor> outs, grads;
    for (const auto mode : {KernelMode::kAten, KernelMode::kFused}) {
      KernelModeGuard guard(mode);
      block->zero_grad();
      compat::set_autocast(torch::kCUDA, true, torch::kHalf);
      const auto y = block->forward(x);
      compat::set_autocast(torch::kCUDA, false, torch::kHalf);
      at::autocast::clear_cache();
      y.to(torch::kFloat).square().mean().backward();
      outs.push_back(y.to(torch::kFloat).detach());
      std::vector<torch::Tensor> g;
      for (const auto& p : block->parameters()) g.push_back(p.grad().flatten());
      grads.push_back(torch::cat(g));
    }
    EXPECT_LT(relative_error(outs[1], outs[0].to(torch::kDouble)), 1e-2) << "channels-last " << cl;
    EXPECT_LT(relative_error(grads[1], grads[0].to(torch::kDouble)), 3e-2) << "channels-last " << cl;
  }
}

}  // namespace
}  // namespace voxfit::kernels
