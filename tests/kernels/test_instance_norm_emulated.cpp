// The fused norm kernels (src/kernels/instance_norm_kernels.cuh), run on the CPU by
// cuda_emulation.h on every build, as instance_norm.cu launches them (statistics, finalize, apply;
// reduce, finalize, apply), on the shapes norm_shape gives: batch norm's whole batch as one
// instance (channels-last with one and two channel tiles; NCDHW, where the instance is the
// channel's plane in every sample: several samples, one sample, one channel) and instance norm,
// against LibTorch's float64 batch / instance norm with the residual add and activation and its
// autograd; and the running statistics update_running_stats makes from
// the kernels' mean and rstd against ATen's batch norm. A few SMs so the rows split into several
// chunks. On a GPU the compiled kernels are checked again (BatchNormActCuda.*, InstanceNormActCuda.*).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "voxfit/kernels/instance_norm_act.h"
// The emulation first: the kernels' source is compiled against it.
#include "cuda_emulation.h"
// clang-format off
#include "../../src/kernels/instance_norm_kernels.cuh"
// clang-format on

namespace voxfit::kernels::cuda {
namespace {

constexpr int kSms = 2;

struct NormCase {
  std::vector<std::int64_t> shape;
  bool channels_last;
  bool batch;  // batch norm's statistics
  Act act;
  bool affine, residual;
};

std::string describe(const NormCase& c) {
  std::string s = c.batch ? "batch norm" : "instance norm";
  for (const auto v : c.shape) s += " " + std::to_string(v);
  return s + (c.channels_last ? " channels-last" : " ncdhw") + " act " + std::to_string(static_cast<int>(c.act)) +
         (c.affine ? " affine" : "") + (c.residual ? " residual" : "");
}

float* ptr(const torch::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

double relative_error(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kDouble) - want).abs().max().item<double>() / (want.abs().max().item<double>() + 1e-12);
}

// The float64 reference of a case: its inputs, and the outputs, gradients of sum(y * g) and running
// statistics ATen makes from them.
struct Reference {
  torch::Tensor x, r, g, w, b;
  torch::Tensor y, dx, dr, dw, db, running_mean, running_var;
};

constexpr double kEps = 1e-5, kSlope = 0.01;

Reference reference(const NormCase& c) {
  torch::manual_seed(static_cast<std::uint64_t>(c.shape[1] * 100 + c.shape[2]));
  const auto format = c.channels_last ? c10::MemoryFormat::ChannelsLast3d : c10::MemoryFormat::Contiguous;
  Reference ref;
  ref.x = (torch::randn(c.shape, torch::kDouble) * 2 + 5).contiguous(format);  // mean far from zero
  ref.r = torch::randn(c.shape, torch::kDouble).contiguous(format);
  ref.g = torch::randn(c.shape, torch::kDouble).contiguous(format);
  ref.w = torch::rand({c.shape[1]}, torch::kDouble) + 0.5;
  ref.b = torch::randn({c.shape[1]}, torch::kDouble);
  auto xr = ref.x.clone().requires_grad_(), rr = ref.r.clone().requires_grad_();
  auto wr = ref.w.clone().requires_grad_(), br = ref.b.clone().requires_grad_();
  ref.running_mean = torch::full({c.shape[1]}, 0.5, torch::kDouble);
  ref.running_var = torch::full({c.shape[1]}, 2.0, torch::kDouble);
  const torch::Tensor wa = c.affine ? wr : torch::Tensor(), ba = c.affine ? br : torch::Tensor();
  auto z = c.batch ? torch::batch_norm(xr, wa, ba, ref.running_mean, ref.running_var, true, 0.3, kEps, false)
                   : torch::instance_norm(xr, wa, ba, {}, {}, true, 0.1, kEps, false);
  if (c.residual) z = z + rr;
  const auto yr = c.act == Act::kReLU ? torch::relu(z) : c.act == Act::kLeakyReLU ? torch::leaky_relu(z, kSlope) : z;
  (yr * ref.g).sum().backward();
  ref.y = yr.detach();
  ref.dx = xr.grad();
  ref.dr = rr.grad();
  ref.dw = wr.grad();
  ref.db = br.grad();
  return ref;
}

// The kernels on float data as the launchers run them, V elements a thread's unit (V > 1: one
// 16-byte access on a GPU, of rows along an NCDHW plane or of channels of a channels-last row; here
// the same indexing), against the reference.
template <int V, bool kChannels>
void check_kernels(const NormCase& c, const Reference& ref) {
  const std::string what = describe(c) + " V " + std::to_string(V);
  const NormShape s =
      norm_shape(c.shape[0], c.shape[1], ref.x.numel() / (c.shape[0] * c.shape[1]), c.channels_last, c.batch);
  ASSERT_EQ(kChannels, V > 1 && c.channels_last) << what;
  ASSERT_EQ((c.channels_last ? s.c : s.s) % V, 0) << what;
  const Tiling t = tiling(s, kSms, kChannels ? V : 1);
  const auto xf = ref.x.to(torch::kFloat), rf = c.residual ? ref.r.to(torch::kFloat) : torch::Tensor();
  const auto gf = ref.g.to(torch::kFloat);
  const auto wf = c.affine ? ref.w.to(torch::kFloat) : torch::Tensor(),
             bf = c.affine ? ref.b.to(torch::kFloat) : torch::Tensor();
  const std::int64_t planes = s.n * s.c;
  auto ws = torch::full({planes * t.chunks * 2}, std::nanf(""));
  auto mean = torch::full({planes}, std::nanf("")), rstd = torch::full({planes}, std::nanf(""));
  auto y = torch::full_like(xf, std::nanf(""));
  ActSpec act;
  act.act = c.act;
  act.slope = static_cast<float>(kSlope);
  const EmulatedDim3 grid{static_cast<unsigned>(t.tiles), static_cast<unsigned>(t.chunks), 1};
  const EmulatedDim3 per_plane{static_cast<unsigned>((planes + 255) / 256), 1, 1};
  emulate_launch(grid, kThreads,
                 [&] { forward_stats<float, V, kChannels>(s, t.tc, t.rows, t.chunk_rows, ptr(xf), ptr(ws)); });
  emulate_launch(per_plane, 256, [&] {
    forward_finalize<float>(s, t.chunks, ptr(xf), ptr(ws), static_cast<float>(kEps), ptr(mean), ptr(rstd));
  });
  emulate_launch(grid, kThreads, [&] {
    forward_apply<float, V, kChannels>(s, t.tc, t.rows, t.chunk_rows, ptr(xf), ptr(wf), ptr(bf), ptr(rf), act,
                                       ptr(mean), ptr(rstd), ptr(y));
  });
  EXPECT_LT(relative_error(y, ref.y), 2e-5) << "y, " << what;

  // Backward: the input kept where the fused autograd node keeps it (affine or ReLU), else the
  // normalised input recovered from y less the residual.
  const bool keep_x = c.affine || c.act == Act::kReLU;
  auto dx = torch::full_like(xf, std::nanf("")), dz = torch::full_like(xf, std::nanf(""));
  auto sum_dz = torch::full({planes}, std::nanf("")), sum_dz_xhat = torch::full({planes}, std::nanf(""));
  const float* xk = keep_x ? ptr(xf) : nullptr;
  emulate_launch(grid, kThreads, [&] {
    backward_reduce<float, V, kChannels>(s, t.tc, t.rows, t.chunk_rows, ptr(gf), ptr(y), xk, ptr(rf), ptr(mean),
                                         ptr(rstd), act, ptr(ws));
  });
  emulate_launch(per_plane, 256, [&] { backward_finalize(planes, t.chunks, ptr(ws), ptr(sum_dz), ptr(sum_dz_xhat)); });
  emulate_launch(grid, kThreads, [&] {
    backward_apply<float, V, kChannels>(s, t.tc, t.rows, t.chunk_rows, ptr(gf), ptr(y), xk, ptr(rf), ptr(mean),
                                        ptr(rstd), ptr(wf), act, ptr(sum_dz), ptr(sum_dz_xhat), ptr(dx),
                                        c.residual ? ptr(dz) : nullptr);
  });
  EXPECT_LT(relative_error(dx, ref.dx), 1e-4) << "dx, " << what;
  if (c.residual) {
    EXPECT_LT(relative_error(dz, ref.dr), 1e-4) << "dresidual, " << what;
  }
  if (c.affine) {
    // dweight, dbias: the per-instance sums over the instances of a channel, as the autograd node adds them.
    EXPECT_LT(relative_error(sum_dz_xhat.view({s.n, s.c}).sum(0), ref.dw), 1e-4) << "dweight, " << what;
    EXPECT_LT(relative_error(sum_dz.view({s.n, s.c}).sum(0), ref.db), 1e-4) << "dbias, " << what;
  }
  if (c.batch) {
    RunningStats running;
    running.mean = torch::full({c.shape[1]}, 0.5, torch::kDouble);
    running.var = torch::full({c.shape[1]}, 2.0, torch::kDouble);
    running.momentum = 0.3;
    update_running_stats(running, mean, rstd, instance_rows(s), kEps);
    EXPECT_LT(relative_error(running.mean, ref.running_mean), 1e-5) << "running mean, " << what;
    EXPECT_LT(relative_error(running.var, ref.running_var), 1e-4) << "running var, " << what;
  }
}

// Every unit the launcher may pick for the case: one element, and 4 or 8 (float's and half's 16
// bytes) where the NCDHW plane's length or the channels-last row's channels allow it.
int check(const NormCase& c) {
  const Reference ref = reference(c);
  check_kernels<1, false>(c, ref);
  int widths = 1;
  const std::int64_t length = c.channels_last ? c.shape[1] : ref.x.numel() / (c.shape[0] * c.shape[1]);
  if (length % 4 == 0) {
    c.channels_last ? check_kernels<4, true>(c, ref) : check_kernels<4, false>(c, ref);
    ++widths;
  }
  if (length % 8 == 0) {
    c.channels_last ? check_kernels<8, true>(c, ref) : check_kernels<8, false>(c, ref);
    ++widths;
  }
  return widths;
}

TEST(NormKernelsEmulated, BatchNormAsOneInstanceAndInstanceNormMatchFloat64) {
  // Batch norm: channels-last, one channel tile, rows over three chunks; channels-last, two tiles
  // of 32 channels; NCDHW with one sample (no affine: the input recovered from the output); NCDHW
  // with one channel; NCDHW with three samples of two channels, each sample's plane in two chunks.
  // Then instance norm: two samples of 216 voxels, and a plane of 2600 voxels over two chunks of
  // 1300 rows, which units of 4 or 8 split at row 1300 or 1296.
  int runs = 0;
  runs += check({{2, 3, 8, 8, 8}, true, true, Act::kReLU, true, true});
  runs += check({{3, 40, 4, 5, 3}, true, true, Act::kNone, true, false});
  runs += check({{1, 4, 6, 7, 5}, false, true, Act::kLeakyReLU, false, true});
  runs += check({{3, 1, 5, 4, 6}, false, true, Act::kReLU, true, false});
  runs += check({{3, 2, 16, 16, 10}, false, true, Act::kLeakyReLU, true, true});
  runs += check({{2, 3, 6, 6, 6}, false, false, Act::kLeakyReLU, true, true});
  runs += check({{1, 2, 26, 10, 10}, false, false, Act::kNone, false, true});
  // Channels-last instance norm: 16 channels (units of 8: two threads a row), and 264 channels (33
  // units of 8: a tile of 32 threads' 256 channels, then one of 8).
  runs += check({{2, 16, 6, 6, 6}, true, false, Act::kReLU, true, true});
  runs += check({{1, 264, 4, 4, 3}, true, false, Act::kLeakyReLU, true, false});
  // Units of 4 and 8 ran wherever the shape allowed them: every case but 3 channels, and the NCDHW
  // plane of 6 x 7 x 5.
  EXPECT_EQ(runs, 1 + 3 + 1 + 3 + 3 + 3 + 3 + 3 + 3);
}

TEST(NormKernelsEmulated, AnNcdhwBatchSplitsEverySamplesPlaneAlike) {
  // Batch norm over 3 samples of 2 channels, 600 voxels each: 2 planes x 3 samples x k chunks, every
  // chunk inside one sample's plane, and the chunks of a plane cover its rows once.
  const NormShape s = norm_shape(3, 2, 600, false, true);
  EXPECT_EQ(s.n, 1);
  EXPECT_EQ(s.samples, 3);
  EXPECT_EQ(instance_rows(s), 1800);
  for (const int sms : {1, 2, 132}) {
    const Tiling t = tiling(s, sms);
    EXPECT_EQ(t.tiles, 2);
    EXPECT_EQ(t.chunks % 3, 0) << sms;
    const int64_t per_plane = t.chunks / 3;
    EXPECT_GE(per_plane * t.chunk_rows, 600) << sms;
    EXPECT_LT((per_plane - 1) * t.chunk_rows, 600) << sms;
  }
  // Channels-last: the batch is consecutive rows, one sample's worth of planes.
  const NormShape cl = norm_shape(3, 2, 600, true, true);
  EXPECT_EQ(cl.samples, 1);
  EXPECT_EQ(instance_rows(cl), 1800);
}

}  // namespace
}  // namespace voxfit::kernels::cuda

#include "cuda_emulation_end.h"
