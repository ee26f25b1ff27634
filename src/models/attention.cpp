#include "voxfit/models/attention.h"

#include <cmath>

#include "voxfit/core/torch_compat.h"

namespace voxfit::models {

AttentionMode resolve_attention(AttentionMode mode) {
  if (mode != AttentionMode::kAuto) return mode;
  return compat::kHasPublicSdpa ? AttentionMode::kSdpa : AttentionMode::kMath;
}

namespace {

torch::Tensor math_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& bias, const torch::Tensor& mask) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = torch::matmul(q * scale, k.transpose(-2, -1));
  if (bias.defined()) scores = scores + bias;
  if (mask.defined()) scores = scores + mask;
  return torch::matmul(scores.softmax(-1), v);
}

// SDPA's memory-efficient kernel needs a mask whose strides (all but the last) are multiples of 8;
// it pads any other mask itself, a copy of the whole mask on every call (Swin's 343-token windows
// are never aligned). So pad the key axis here, in q's dtype, before the terms are added: the sum
// is written aligned once and its narrowed view goes to the kernel as it is.
torch::Tensor aligned_rows(const torch::Tensor& t, c10::ScalarType dtype) {
  const int64_t s = t.size(-1), padded = (s + 7) / 8 * 8;
  return torch::constant_pad_nd(t.to(dtype), {0, padded - s});
}

// Fused kernels take [B, H, L, D] and a mask broadcastable to [B, H, L, S]: fold every middle
// dimension of q into H and reshape the additive terms to match without materialising a batch.
torch::Tensor sdpa_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& bias, const torch::Tensor& mask) {
  const int64_t b = q.size(0), l = q.size(-2), s = k.size(-2);
  const auto q4 = q.reshape({b, -1, l, q.size(-1)});
  const auto k4 = k.reshape({b, -1, s, k.size(-1)});
  const auto v4 = v.reshape({b, -1, s, v.size(-1)});
  std::optional<torch::Tensor> combined;
  if (bias.defined() || mask.defined()) {
    const auto dtype = q.scalar_type();
    torch::Tensor m = bias.defined() && mask.defined() ? aligned_rows(bias, dtype) + aligned_rows(mask, dtype)
                                                       : aligned_rows(bias.defined() ? bias : mask, dtype);
    const int64_t padded = m.size(-1), heads = q4.size(1);
    // The reshapes below merge leading dimensions only, so they stay views of the aligned sum.
    if (m.dim() < q.dim() || m.size(0) == 1) {
      // No batch dimension of its own: one copy for all samples.
      std::vector<int64_t> per_sample(q.sizes().begin() + 1, q.sizes().end() - 1);
      per_sample.push_back(padded);
      if (m.dim() == q.dim()) m = m.squeeze(0);
      m = m.expand(per_sample).reshape({1, heads, l, padded});
    } else {
      std::vector<int64_t> full(q.sizes().begin(), q.sizes().end() - 1);
      full.push_back(padded);
      m = m.expand(full).reshape({b, heads, l, padded});
    }
    combined = m.narrow(-1, 0, s);
  }
  auto out = compat::scaled_dot_product_attention(q4, k4, v4, combined);
  std::vector<int64_t> shape(q.sizes().begin(), q.sizes().end() - 1);
  shape.push_back(v.size(-1));
  return out.reshape(shape);
}

}  // namespace

torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& bias, const torch::Tensor& mask, AttentionMode mode) {
  TORCH_CHECK(q.dim() >= 4 && k.dim() == q.dim() && v.dim() == q.dim(),
              "attention: q, k, v must be [B, heads..., L, D] of one rank, got ", q.sizes(), ", ", k.sizes(), ", ",
              v.sizes());
  if (resolve_attention(mode) == AttentionMode::kSdpa) return sdpa_attention(q, k, v, bias, mask);
  return math_attention(q, k, v, bias, mask);
}

}  // namespace voxfit::models
