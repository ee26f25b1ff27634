// kernels::layer_norm: the ATen reference is what nn::LayerNorm computes, and (on a CUDA build with
// a GPU) the fused kernels match a float64 reference in the output and in every gradient, for
// three dtypes, narrow, odd and wide rows (the register and the loop kernels), with and without
// affine parameters and for a non-contiguous input; they give the same bits twice and keep the
// half input, not a float32 cast. add_layer_norm (the residual add in the norm's kernel) is the
// add, then the norm, in both outputs and every gradient.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "voxfit/core/torch_compat.h"
#include "voxfit/kernels/instance_norm_act.h"
#include "voxfit/kernels/layer_norm.h"
#include "voxfit/memory/oom.h"
#include "kernel_test_support.h"

namespace voxfit::kernels {
namespace layer_norm_test {

using test::cuda_here;
using test::relative_error;
using test::tolerance;

TEST(LayerNorm, CpuRunsTheReferenceWhichIsTheModule) {
  KernelModeGuard fused(KernelMode::kFused);
  torch::manual_seed(5);
  torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({12}));
  {
    torch::NoGradGuard no_grad;
    norm->weight.uniform_(0.5, 1.5);
    norm->bias.uniform_(-0.5, 0.5);
  }
  const auto x = torch::randn({2, 5, 3, 12}) * 3 + 1;
  EXPECT_FALSE(fused_layer_norm_applies(x, norm->weight, norm->bias));
  EXPECT_TRUE(torch::equal(kernels::layer_norm(x, norm->weight, norm->bias), norm(x)));
  EXPECT_TRUE(torch::equal(kernels::layer_norm(x, torch::Tensor(), torch::Tensor()), torch::layer_norm(x, {12})));
}

struct LnCase {
  std::vector<int64_t> shape;
  torch::ScalarType dtype;
  bool affine;
  bool transposed;  // the input is a transposed view (not contiguous)
};

std::string describe(const LnCase& c) {
  std::string s = "shape";
  for (const auto v : c.shape) s += " " + std::to_string(v);
  return s + " " + std::string(c10::toString(c.dtype)) + (c.affine ? " affine" : "") +
         (c.transposed ? " transposed" : "");
}

struct LnOutputs {
  torch::Tensor y, dx, dw, db;
};

LnOutputs run(const LnCase& c, const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& b0,
            const torch::Tensor& g0, torch::ScalarType dtype, bool fused) {
  KernelModeGuard mode(fused ? KernelMode::kFused : KernelMode::kAten);
  // A transposed case holds x as [.., W, R] and normalises its transpose's rows.
  auto leaf = (c.transposed ? x0.transpose(-1, -2).contiguous() : x0).to(dtype).detach().requires_grad_(true);
  const auto x = c.transposed ? leaf.transpose(-1, -2) : leaf;
  torch::Tensor w, b;
  if (c.affine) {
    w = w0.to(dtype == torch::kDouble ? torch::kDouble : torch::kFloat).detach().requires_grad_(true);
    b = b0.to(w.scalar_type()).detach().requires_grad_(true);
  }
  if (fused) {
    EXPECT_TRUE(fused_layer_norm_applies(x, w, b)) << describe(c);
  }
  const auto y = kernels::layer_norm(x, w, b);
  EXPECT_EQ(y.scalar_type(), dtype) << describe(c);
  (y.to(torch::kDouble) * g0).sum().backward();
  LnOutputs o;
  o.y = y.detach();
  o.dx = c.transposed ? leaf.grad().transpose(-1, -2) : leaf.grad();
  if (c.affine) o.dw = w.grad(), o.db = b.grad();
  return o;
}

TEST(LayerNormCuda, FusedMatchesFloat64ReferenceInOutputAndEveryGradient) {
  if (!cuda_here()) GTEST_SKIP() << "no CUDA in this build or machine";
  // Widths: one lane's worth and less, SwinUNETR's 48 / 96 / 384, odd ones, UNETR's 768, the widest
  // register row (1024), two loop-kernel rows, and 264. Rows of at least 32 vectors (16 bytes: 8
  // half or 4 float elements), at most 1024 wide and a whole number of vectors take vector loads:
  // 384, 768, 1024 and 264, whose last chunk is one or two lanes'. Row counts: fewer than a block's
  // warps and more than the launch's warps (so that warps take several row groups).
  const std::vector<std::vector<int64_t>> shapes = {{3, 1},    {37, 7},   {2, 1100, 48}, {5, 3, 96},
                                                    {9, 100},  {41, 384}, {6, 768},      {3, 1024},
                                                    {4, 1030}, {3, 3072}, {70000, 48}, {50, 264}};
  std::vector<LnCase> cases;
  for (const auto& shape : shapes)
    for (const auto dtype : {torch::kFloat, torch::kHalf, torch::kBFloat16})
      for (const bool affine : {false, true}) cases.push_back({shape, dtype, affine, false});
  cases.push_back({{2, 33, 48}, torch::kHalf, true, true});
  cases.push_back({{2, 50, 1030}, torch::kFloat, true, true});
  const torch::Device cuda(torch::kCUDA);
  int checked = 0;
  for (const auto& c : cases) {
    torch::manual_seed(checked);
    const auto opts = torch::TensorOptions().dtype(torch::kDouble).device(cuda);
    const int64_t width = c.shape.back();
    // A mean far from zero relative to the spread checks the statistics' precision.
    const auto x = torch::randn(c.shape, opts) * 2 + 5;
    const auto w = torch::rand({width}, opts) + 0.5, b = torch::randn({width}, opts);
    const auto g = torch::randn(c.shape, opts);
    // The reference sees the same rounded input as the fused run.
    const auto want = run(c, x.to(c.dtype).to(torch::kDouble), w, b, g, torch::kDouble, false);
    const auto got = run(c, x, w, b, g, c.dtype, true);
    const double tol = tolerance(c.dtype);
    EXPECT_LT(relative_error(got.y, want.y), tol) << "y, " << describe(c);
    EXPECT_LT(relative_error(got.dx, want.dx), tol) << "dx, " << describe(c);
    if (c.affine) {
      EXPECT_LT(relative_error(got.dw, want.dw), tol) << "dweight, " << describe(c);
      EXPECT_LT(relative_error(got.db, want.db), tol) << "dbias, " << describe(c);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 12 * 3 * 2 + 2);
}

TEST(LayerNormCuda, SameInputGivesTheSameBits) {
  if (!cuda_here()) GTEST_SKIP() << "no CUDA in this build or machine";
  KernelModeGuard fused(KernelMode::kFused);
  const auto half = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kHalf);
  const auto x = torch::randn({2, 24, 24, 24, 48}, half), g = torch::randn({2, 24, 24, 24, 48}, half);
  std::vector<torch::Tensor> dw;
  for (int i = 0; i < 2; ++i) {
    const auto w = torch::ones({48}, half.dtype(torch::kFloat)).requires_grad_();
    kernels::layer_norm(x, w, torch::Tensor()).backward(g);
    dw.push_back(w.grad());
  }
  EXPECT_TRUE(torch::equal(kernels::layer_norm(x, torch::Tensor(), torch::Tensor()), kernels::layer_norm(x, torch::Tensor(), torch::Tensor())));
  EXPECT_TRUE(torch::equal(dw[0], dw[1]));
}

// Under fp16 autocast ATen's layer norm casts a half input to float32, keeps that cast for
// backward and returns float32; the fused one keeps the half input as given and returns half.
TEST(LayerNormCuda, KeepsTheHalfInputNotAFloatCast) {
  if (!cuda_here()) GTEST_SKIP() << "no CUDA in this build or machine";
  const torch::Device cuda(torch::kCUDA);
  const auto half = torch::TensorOptions().dtype(torch::kHalf).device(cuda);
  const int64_t bytes = 2 * 32 * 32 * 32 * 48 * 2;  // the input's
  std::vector<int64_t> kept;
  for (const auto mode : {KernelMode::kAten, KernelMode::kFused}) {
    KernelModeGuard guard(mode);
    const auto a = torch::randn({2, 32, 32, 32, 48}, half).requires_grad_();
    const auto w = torch::ones({48}, half.dtype(torch::kFloat)).requires_grad_(), b = torch::zeros_like(w);
    torch::cuda::synchronize();
    const auto before = static_cast<int64_t>(memory::current_allocated_bytes(cuda));
    compat::set_autocast(torch::kCUDA, true, torch::kHalf);
    auto x = a * 2;  // a fresh tensor: only the norm can keep it
    auto y = kernels::layer_norm(x, w, b);
    compat::set_autocast(torch::kCUDA, false, torch::kHalf);
    at::autocast::clear_cache();
    EXPECT_EQ(y.scalar_type(), mode == KernelMode::kFused ? torch::kHalf : torch::kFloat);
    y = y.to(torch::kHalf);  // what the next linear layer reads
    x = torch::Tensor();
    torch::cuda::synchronize();
    kept.push_back(static_cast<int64_t>(memory::current_allocated_bytes(cuda)) - before - bytes);  // less y
    y.to(torch::kFloat).sum().backward();
    EXPECT_TRUE(a.grad().defined() && w.grad().defined());
  }
  // ATen: the float32 cast (2x the input's bytes); fused: the input itself; both plus a few KB of
  // statistics.
  EXPECT_GE(kept[0], 2 * bytes) << "aten";
  EXPECT_LT(kept[1], bytes + bytes / 8) << "fused";
}

// add_layer_norm: the residual stream's add and the norm after it. The reference (CPU, and any
// case the fused kernel does not take) is the add, then layer_norm.
TEST(AddLayerNorm, CpuIsTheAddThenTheNormAndBothInputsGetTheSumsGradient) {
  KernelModeGuard fused(KernelMode::kFused);
  torch::manual_seed(6);
  const auto x = (torch::randn({2, 5, 16}) * 3 + 1).requires_grad_(), r = torch::randn({2, 5, 16}).requires_grad_();
  const auto w = torch::rand({16}) + 0.5, b = torch::randn({16});
  EXPECT_FALSE(fused_add_layer_norm_applies(x, r, w, b));
  const auto out = add_layer_norm(x, r, w, b);
  EXPECT_TRUE(torch::equal(out.sum, x + r));
  EXPECT_TRUE(torch::equal(out.normed, torch::layer_norm(x + r, {16}, w, b)));
  (out.sum.sum() + (out.normed * out.normed).sum()).backward();
  EXPECT_TRUE(torch::equal(x.grad(), r.grad()));
}

struct AddNormOutputs {
  torch::Tensor sum, normed, dx, dr, dw, db;
};

// sum and normed of add_layer_norm in `mode`, and the gradients of sum . g_sum + normed . g_norm
// (g_sum undefined: the sum is not used, as for the last norm of an encoder).
AddNormOutputs run_add(KernelMode mode, const torch::Tensor& x0, const torch::Tensor& r0, const torch::Tensor& w0,
                       const torch::Tensor& b0, const torch::Tensor& g_sum, const torch::Tensor& g_norm,
                       torch::ScalarType dtype) {
  KernelModeGuard guard(mode);
  const auto x = x0.to(dtype).detach().requires_grad_(), r = r0.to(dtype).detach().requires_grad_();
  const auto param = dtype == torch::kDouble ? torch::kDouble : torch::kFloat;
  const auto w = w0.to(param).detach().requires_grad_(), b = b0.to(param).detach().requires_grad_();
  const auto out = add_layer_norm(x, r, w, b);
  auto loss = (out.normed.to(torch::kDouble) * g_norm).sum();
  if (g_sum.defined()) loss = loss + (out.sum.to(torch::kDouble) * g_sum).sum();
  loss.backward();
  return {out.sum.detach(), out.normed.detach(), x.grad(), r.grad(), w.grad(), b.grad()};
}

TEST(LayerNormCuda, AddNormMatchesTheAddThenTheNormInBothOutputsAndEveryGradient) {
  if (!cuda_here()) GTEST_SKIP() << "no CUDA in this build or machine";
  const torch::Device cuda(torch::kCUDA);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble).device(cuda);
  int fused_cases = 0, checked = 0;
  // ViT-B's 768 (three vectors a lane), 264 (a last chunk of one or two lanes), 1024, and 96, which
  // the one-pass kernel does not take (the add, then the norm's own kernel).
  for (const auto& shape : {std::vector<int64_t>{3, 197, 768}, {50, 264}, {7, 1024}, {33, 96}})
    for (const auto dtype : {torch::kFloat, torch::kHalf, torch::kBFloat16})
      for (const bool sum_used : {true, false}) {
        torch::manual_seed(checked);
        const int64_t width = shape.back();
        const auto x = torch::randn(shape, opts) * 2 + 5, r = torch::randn(shape, opts);
        const auto w = torch::rand({width}, opts) + 0.5, b = torch::randn({width}, opts);
        const auto g_norm = torch::randn(shape, opts);
        const auto g_sum = sum_used ? torch::randn(shape, opts) : torch::Tensor();
        const auto xs = x.to(dtype), rs = r.to(dtype);
        {
          KernelModeGuard fused(KernelMode::kFused);
          fused_cases += fused_add_layer_norm_applies(xs, rs, w.to(torch::kFloat), b.to(torch::kFloat));
        }
        const auto got = run_add(KernelMode::kFused, x, r, w, b, g_sum, g_norm, dtype);
        // The sum is rounded to the dtype as ATen's add rounds it: the same bits. (Not through
        // run_add in ATen mode: ATen's CUDA layer norm refuses a half input with float weights.)
        const auto aten_sum = xs + rs;
        const std::string what = std::to_string(width) + " " + c10::toString(dtype) + (sum_used ? "" : ", sum unused");
        EXPECT_TRUE(torch::equal(got.sum, aten_sum)) << what;
        // Everything else against float64 on that rounded sum.
        const auto want = run_add(KernelMode::kAten, aten_sum.to(torch::kDouble), torch::zeros_like(x), w, b, g_sum,
                                  g_norm, torch::kDouble);
        const double tol = tolerance(dtype);
        EXPECT_LT(relative_error(got.normed, want.normed), tol) << "normed, " << what;
        EXPECT_LT(relative_error(got.dx, want.dx), tol) << "dx, " << what;
        EXPECT_TRUE(torch::equal(got.dx, got.dr)) << what;
        EXPECT_LT(relative_error(got.dw, want.dw), tol) << "dweight, " << what;
        EXPECT_LT(relative_error(got.db, want.db), tol) << "dbias, " << what;
        ++checked;
      }
  EXPECT_EQ(checked, 4 * 3 * 2);
  EXPECT_EQ(fused_cases, 3 * 3 * 2);  // all but the 96-wide rows
}

}  // namespace layer_norm_test
}  // namespace voxfit::kernels
