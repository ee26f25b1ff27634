#include "voxfit/models/blocks/swin.h"

#include <torch/torch.h>

#include "voxfit/core/error.h"
#include "voxfit/kernels/instance_norm_act.h"
#include "voxfit/kernels/layer_norm.h"
#include "voxfit/models/attention.h"
#include "voxfit/models/blocks/layers.h"
#include "voxfit/models/checkpoint.h"

namespace voxfit::models {

namespace nn = torch::nn;
using torch::indexing::None;
using torch::indexing::Slice;

std::pair<Size3, Size3> window_and_shift(const Size3& size, const Size3& window, const Size3& shift) {
  Size3 w = window, s = shift;
  for (int i = 0; i < 3; ++i) {
    if (size[i] <= window[i]) {
      w[i] = size[i];
      s[i] = 0;
    }
  }
  return {w, s};
}

namespace {

int64_t volume(const Size3& s) { return s[0] * s[1] * s[2]; }

// `size` rounded up to whole windows along every axis.
Size3 padded_to_windows(const Size3& size, const Size3& window) {
  Size3 padded;
  for (int i = 0; i < 3; ++i) padded[i] = (size[i] + window[i] - 1) / window[i] * window[i];
  return padded;
}

// [B, D, H, W, C] -> [B * windows, n, C], windows in (d, h, w) raster order.
torch::Tensor window_partition(const torch::Tensor& x, const Size3& w) {
  const int64_t b = x.size(0), d = x.size(1), h = x.size(2), wd = x.size(3), c = x.size(4);
  return x.view({b, d / w[0], w[0], h / w[1], w[1], wd / w[2], w[2], c})
      .permute({0, 1, 3, 5, 2, 4, 6, 7})
      .contiguous()
      .view({-1, volume(w), c});
}

torch::Tensor window_reverse(const torch::Tensor& windows, const Size3& w, int64_t b, const Size3& dims) {
  return windows.view({b, dims[0] / w[0], dims[1] / w[1], dims[2] / w[2], w[0], w[1], w[2], -1})
      .permute({0, 1, 4, 2, 5, 3, 6, 7})
      .contiguous()
      .view({b, dims[0], dims[1], dims[2], -1});
}

// Region of each position along one axis after the cyclic shift (MONAI's three slices). With no
// shift Python's slice(-0, None) covers the whole axis, so every position is one region.
std::vector<int64_t> axis_regions(int64_t length, int64_t window, int64_t shift) {
  std::vector<int64_t> r(length, 0);
  if (shift == 0) return r;
  for (int64_t i = 0; i < length; ++i) r[i] = i < length - window ? 0 : (i < length - shift ? 1 : 2);
  return r;
}

torch::Tensor axis_tensor(const std::vector<int64_t>& v) { return torch::tensor(v, torch::kLong); }

// out[:, p] = in[:, gather[p]] with the rows `zero` set to 0, and the gradient the other way
// round: grad_in[:, t] = grad_out[:, back_gather[t]] with the rows `back_zero` set to 0.
class WindowMove : public torch::autograd::Function<WindowMove> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& in,
                                                const torch::Tensor& gather, const torch::Tensor& zero,
                                                const torch::Tensor& back_gather, const torch::Tensor& back_zero) {
    ctx->save_for_backward({back_gather, back_zero});
    return {move(in, gather, zero)};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    return {move(grads[0], saved[0], saved[1]), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }

  static torch::Tensor move(const torch::Tensor& in, const torch::Tensor& gather, const torch::Tensor& zero) {
    auto out = in.index_select(1, gather);
    if (zero.numel() > 0) out.index_fill_(1, zero, 0);
    return out;
  }
};

}  // namespace

WindowOrder window_order(const Size3& size, const Size3& window, const Size3& shift, const torch::Device& device) {
  const Size3 padded = padded_to_windows(size, window);
  const Size3 grid = {padded[0] / window[0], padded[1] / window[1], padded[2] / window[2]};
  const int64_t n = volume(window), positions = volume(padded);
  std::vector<int64_t> source(positions), padding, window_of(volume(size));
  for (int64_t p = 0; p < positions; ++p) {
    const int64_t win = p / n, in = p % n;
    const Size3 cell = {win / (grid[1] * grid[2]), win / grid[2] % grid[1], win % grid[2]};
    const Size3 offset = {in / (window[1] * window[2]), in / window[2] % window[1], in % window[2]};
    Size3 q;  // the padded map's coordinate that roll(-shift) brings to this position
    bool pad = false;
    for (int i = 0; i < 3; ++i) {
      q[i] = (cell[i] * window[i] + offset[i] + shift[i]) % padded[i];
      pad = pad || q[i] >= size[i];
    }
    if (pad) {
      source[p] = 0;
      padding.push_back(p);
      continue;
    }
    const int64_t t = (q[0] * size[1] + q[1]) * size[2] + q[2];
    source[p] = t;
    window_of[t] = p;
  }
  return {axis_tensor(source).to(device), axis_tensor(padding).to(device), axis_tensor(window_of).to(device)};
}

// A padding position takes no token, and its output is cropped away: its gradient is zero.
torch::Tensor to_windows(const torch::Tensor& tokens, const WindowOrder& order) {
  const torch::Tensor none = torch::empty({0}, order.source.options());
  return WindowMove::apply(tokens, order.source, order.padding, order.window_of, none)[0];
}

torch::Tensor from_windows(const torch::Tensor& windows, const WindowOrder& order) {
  const torch::Tensor none = torch::empty({0}, order.source.options());
  return WindowMove::apply(windows, order.window_of, none, order.source, order.padding)[0];
}

torch::Tensor shifted_window_mask(const Size3& padded, const Size3& window, const Size3& shift,
                                  const torch::Device& device) {
  const auto rd = axis_tensor(axis_regions(padded[0], window[0], shift[0])).view({-1, 1, 1});
  const auto rh = axis_tensor(axis_regions(padded[1], window[1], shift[1])).view({1, -1, 1});
  const auto rw = axis_tensor(axis_regions(padded[2], window[2], shift[2])).view({1, 1, -1});
  // Built on the target device: the [windows, n, n] comparison is the big part.
  const auto regions = (rd * 9 + rh * 3 + rw).to(device, torch::kFloat).view({1, padded[0], padded[1], padded[2], 1});
  const auto per_window = window_partition(regions, window).squeeze(-1);  // [windows, n]
  const auto diff = per_window.unsqueeze(1) - per_window.unsqueeze(2);
  return (diff != 0).to(torch::kFloat) * -100.0f;
}

WindowAttentionImpl::WindowAttentionImpl(int64_t dim, int64_t heads, const Size3& w, bool qkv_bias, AttentionMode mode)
    : heads_(heads), mode_(mode) {
  if (heads < 1 || dim % heads != 0)
    throw ModelError("swin_unetr: stage width " + std::to_string(dim) + " is not divisible by its " +
                     std::to_string(heads) + " heads");
  table_ = register_parameter("relative_position_bias_table",
                              torch::zeros({(2 * w[0] - 1) * (2 * w[1] - 1) * (2 * w[2] - 1), heads}));
  trunc_normal_(table_, 0.02);
  const int64_t n = volume(w);
  auto index = torch::empty({n, n}, torch::kLong);
  auto acc = index.accessor<int64_t, 2>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t di = i / (w[1] * w[2]), hi = i / w[2] % w[1], wi = i % w[2];
    for (int64_t j = 0; j < n; ++j) {
      const int64_t dj = j / (w[1] * w[2]), hj = j / w[2] % w[1], wj = j % w[2];
      acc[i][j] = (di - dj + w[0] - 1) * (2 * w[1] - 1) * (2 * w[2] - 1) + (hi - hj + w[1] - 1) * (2 * w[2] - 1) +
                  (wi - wj + w[2] - 1);
    }
  }
  index_ = register_buffer("relative_position_index", index);
  qkv_ = register_module("qkv", nn::Linear(nn::LinearOptions(dim, 3 * dim).bias(qkv_bias)));
  proj_ = register_module("proj", nn::Linear(dim, dim));
}

torch::Tensor WindowAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  const int64_t b = x.size(0), n = x.size(1), c = x.size(2), hd = c / heads_;
  const auto qkv = apply_linear(qkv_, x).reshape({b, n, 3, heads_, hd}).permute({2, 0, 3, 1, 4});
  // MONAI takes the top-left n x n of the full window's index when the window has shrunk.
  const auto index = index_.index({Slice(0, n), Slice(0, n)}).reshape(-1);
  const auto bias = table_.index_select(0, index).view({n, n, heads_}).permute({2, 0, 1}).contiguous();
  torch::Tensor out;
  if (mask.defined()) {
    const int64_t windows = mask.size(0);
    const std::vector<int64_t> grouped = {b / windows, windows, heads_, n, hd};
    out = attention(qkv[0].reshape(grouped), qkv[1].reshape(grouped), qkv[2].reshape(grouped), bias, mask.unsqueeze(1),
                    mode_)
              .reshape({b, heads_, n, hd});
  } else {
    out = attention(qkv[0], qkv[1], qkv[2], bias, {}, mode_);
  }
  return apply_linear(proj_, out.transpose(1, 2).reshape({b, n, c}));
}

SwinBlockImpl::SwinBlockImpl(int64_t dim, int64_t heads, const Size3& window, const Size3& shift, double mlp_ratio,
                             bool qkv_bias, AttentionMode mode)
    : window_(window), shift_(shift) {
  norm1_ = register_module("norm1", nn::LayerNorm(nn::LayerNormOptions({dim})));
  attn_ = register_module("attn", WindowAttention(dim, heads, window, qkv_bias, mode));
  norm2_ = register_module("norm2", nn::LayerNorm(nn::LayerNormOptions({dim})));
  mlp_ = register_module("mlp", Mlp(dim, static_cast<int64_t>(dim * mlp_ratio)));
}

torch::Tensor SwinBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  const int64_t b = x.size(0), c = x.size(4);
  const Size3 size = {x.size(1), x.size(2), x.size(3)};
  const auto [w, s] = window_and_shift(size, window_, shift_);
  const Size3 padded = padded_to_windows(size, w);
  const Size3 pad = {padded[0] - size[0], padded[1] - size[1], padded[2] - size[2]};
  const auto y = apply_layer_norm(norm1_, x);
  const bool shifted = s[0] > 0 || s[1] > 0 || s[2] > 0;
  const torch::Tensor shift_mask = shifted ? mask : torch::Tensor();
  torch::Tensor attended;
  if (kernels::kernel_mode() == kernels::KernelMode::kFused) {  // one gather each way
    auto order = orders_.find(size);
    if (order == orders_.end() || order->second.source.device() != x.device())
      order = orders_.insert_or_assign(size, window_order(size, w, s, x.device())).first;
    const auto windows = to_windows(y.reshape({b, -1, c}), order->second).view({-1, volume(w), c});
    attended = from_windows(attn_(windows, shift_mask).view({b, -1, c}), order->second).view(x.sizes());
  } else {  // the reference: MONAI's pad, roll, window partition and back
    const bool padding = pad[0] > 0 || pad[1] > 0 || pad[2] > 0;
    auto t = padding ? torch::constant_pad_nd(y, {0, 0, 0, pad[2], 0, pad[1], 0, pad[0]}) : y;
    if (shifted) t = torch::roll(t, {-s[0], -s[1], -s[2]}, {1, 2, 3});
    const auto windows = attn_(window_partition(t, w), shift_mask);
    t = window_reverse(windows.view({-1, w[0], w[1], w[2], c}), w, b, padded);
    if (shifted) t = torch::roll(t, {s[0], s[1], s[2]}, {1, 2, 3});
    attended = padding ? t.index({Slice(), Slice(0, size[0]), Slice(0, size[1]), Slice(0, size[2])}).contiguous() : t;
  }
  const auto h = x + attended;
  return h + mlp_(apply_layer_norm(norm2_, h));
}

PatchMergingImpl::PatchMergingImpl(int64_t dim) {
  norm_ = register_module("norm", nn::LayerNorm(nn::LayerNormOptions({8 * dim})));
  reduction_ = register_module("reduction", nn::Linear(nn::LinearOptions(8 * dim, 2 * dim).bias(false)));
}

torch::Tensor PatchMergingImpl::forward(const torch::Tensor& x) {
  auto y = x;
  const int64_t d = x.size(1), h = x.size(2), w = x.size(3);
  if (d % 2 || h % 2 || w % 2) y = torch::constant_pad_nd(y, {0, 0, 0, w % 2, 0, h % 2, 0, d % 2});
  const auto at = [&y](int64_t i, int64_t j, int64_t k) {
    return y.index({Slice(), Slice(i, None, 2), Slice(j, None, 2), Slice(k, None, 2), Slice()});
  };
  // The eight neighbours in the order of MONAI 1.5's PatchMerging (d, h, w offsets).
  y = torch::cat(
      {at(0, 0, 0), at(1, 0, 0), at(0, 1, 0), at(0, 0, 1), at(1, 1, 0), at(1, 0, 1), at(0, 1, 1), at(1, 1, 1)}, -1);
  return apply_linear(reduction_, apply_layer_norm(norm_, y));
}

SwinTransformerImpl::SwinTransformerImpl(const SwinTransformerOptions& o) : options_(o) {
  if (o.depths().size() != 4 || o.num_heads().size() != 4)
    throw ModelError("swin_unetr: depths and num_heads need 4 stages each, got " + std::to_string(o.depths().size()) +
                     " and " + std::to_string(o.num_heads().size()));
  patch_embed_ =
      register_module("patch_embed", nn::Conv3d(nn::Conv3dOptions(o.in_channels(), o.embed_dim(), 2).stride(2)));
  const Size3 window = {o.window_size(), o.window_size(), o.window_size()};
  const Size3 half = {o.window_size() / 2, o.window_size() / 2, o.window_size() / 2};
  for (size_t stage = 0; stage < 4; ++stage) {
    const int64_t dim = o.embed_dim() << stage;
    const auto n = std::to_string(stage + 1);
    if (o.use_v2()) {
      v2_blocks_.push_back(UnetBlock(UnetBlockOptions(dim, dim)));
      register_module("layers" + n + "c", v2_blocks_.back());
    }
    std::vector<SwinBlock> blocks;
    for (int64_t i = 0; i < o.depths()[stage]; ++i) {
      blocks.push_back(SwinBlock(dim, o.num_heads()[stage], window, i % 2 == 0 ? Size3{0, 0, 0} : half, o.mlp_ratio(),
                                 o.qkv_bias(), o.attention()));
      register_module("layers" + n + "_block" + std::to_string(i), blocks.back());
    }
    blocks_.push_back(std::move(blocks));
    merging_.push_back(PatchMerging(dim));
    register_module("layers" + n + "_downsample", merging_.back());
  }
}

torch::Tensor SwinTransformerImpl::run_stage(size_t stage, const torch::Tensor& x) {
  const int64_t b = x.size(0);
  const Size3 size = {x.size(2), x.size(3), x.size(4)};
  const int64_t w = options_.window_size();
  const auto [window, shift] = window_and_shift(size, {w, w, w}, {w / 2, w / 2, w / 2});
  torch::Tensor mask;
  if (shift[0] > 0 || shift[1] > 0 || shift[2] > 0) {
    const Size3 padded = padded_to_windows(size, window);
    std::string key = x.device().str();
    for (int i = 0; i < 3; ++i)
      key += "|" + std::to_string(padded[i]) + "," + std::to_string(window[i]) + "," + std::to_string(shift[i]);
    auto& cached = masks_[key];
    if (!cached.defined()) cached = shifted_window_mask(padded, window, shift, x.device());
    mask = cached;
  }
  auto y = x.permute({0, 2, 3, 4, 1});
  for (auto& block : blocks_[stage]) {
    y = maybe_checkpoint(options_.checkpoint_blocks(), is_training(),
                         [block](const std::vector<torch::Tensor>& in) mutable -> std::vector<torch::Tensor> {
                           return {block->forward(in[0], in[1])};
                         },
                         {y, mask});
  }
  y = y.reshape({b, size[0], size[1], size[2], -1});
  auto merge = merging_[stage];
  y = maybe_checkpoint(
      options_.checkpoint_rest(), is_training(),
      [merge](const torch::Tensor& in) mutable { return merge->forward(in); }, y);
  return y.permute({0, 4, 1, 2, 3});
}

namespace {
torch::Tensor normalize_channels(const torch::Tensor& x) {
  const auto cl = x.permute({0, 2, 3, 4, 1});
  return kernels::layer_norm(cl, {}, {}).permute({0, 4, 1, 2, 3});
}
}  // namespace

std::vector<torch::Tensor> SwinTransformerImpl::forward(const torch::Tensor& x) {
  auto h = patch_embed_(x);
  std::vector<torch::Tensor> out;
  const auto emit = [&](const torch::Tensor& t) { out.push_back(options_.normalize() ? normalize_channels(t) : t); };
  emit(h);
  for (size_t stage = 0; stage < 4; ++stage) {
    if (options_.use_v2()) {
      auto block = v2_blocks_[stage];
      h = maybe_checkpoint(
          options_.checkpoint_rest(), is_training(),
          [block](const torch::Tensor& in) mutable { return block->forward(in); }, h.contiguous());
    }
    h = run_stage(stage, h.contiguous());
    emit(h);
  }
  return out;
}

}  // namespace voxfit::models
