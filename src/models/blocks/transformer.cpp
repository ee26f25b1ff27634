#include "voxfit/models/blocks/transformer.h"

#include <torch/torch.h>

#include "voxfit/core/error.h"
#include "voxfit/models/attention.h"
#include "voxfit/models/blocks/layers.h"

namespace voxfit::models {

namespace nn = torch::nn;

SelfAttentionImpl::SelfAttentionImpl(const TransformerBlockOptions& o) : heads_(o.num_heads()), mode_(o.attention()) {
  if (o.num_heads() < 1 || o.hidden_size() % o.num_heads() != 0)
    throw ModelError("hidden_size (" + std::to_string(o.hidden_size()) + ") must be divisible by num_heads (" +
                     std::to_string(o.num_heads()) + ")");
  qkv_ = register_module("qkv", nn::Linear(nn::LinearOptions(o.hidden_size(), 3 * o.hidden_size()).bias(o.qkv_bias())));
  proj_ = register_module("proj", nn::Linear(o.hidden_size(), o.hidden_size()));
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t b = x.size(0), l = x.size(1), c = x.size(2);
  const auto qkv = apply_linear(qkv_, x).reshape({b, l, 3, heads_, c / heads_}).permute({2, 0, 3, 1, 4});
  const auto out = attention(qkv[0], qkv[1], qkv[2], {}, {}, mode_);
  return apply_linear(proj_, out.transpose(1, 2).reshape({b, l, c}));
}

MlpImpl::MlpImpl(int64_t dim, int64_t hidden) {
  fc1_ = register_module("fc1", nn::Linear(dim, hidden));
  fc2_ = register_module("fc2", nn::Linear(hidden, dim));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) { return apply_linear(fc2_, act_(apply_linear(fc1_, x))); }

TransformerBlockImpl::TransformerBlockImpl(const TransformerBlockOptions& o) {
  const auto ln = nn::LayerNormOptions({o.hidden_size()}).eps(o.norm_eps());
  norm1_ = register_module("norm1", nn::LayerNorm(ln));
  attn_ = register_module("attn", SelfAttention(o));
  norm2_ = register_module("norm2", nn::LayerNorm(ln));
  mlp_ = register_module("mlp", Mlp(o.hidden_size(), o.mlp_dim()));
}

torch::Tensor TransformerBlockImpl::forward(const torch::Tensor& x) {
  auto [stream, update] = forward_parts(x, {});
  return stream + update;
}

std::pair<torch::Tensor, torch::Tensor> TransformerBlockImpl::forward_parts(const torch::Tensor& stream,
                                                                            const torch::Tensor& pending) {
  kernels::AddNorm in{stream, {}};
  if (pending.defined())
    in = apply_add_layer_norm(norm1_, stream, pending);
  else
    in.normed = apply_layer_norm(norm1_, stream);
  const auto mid = apply_add_layer_norm(norm2_, in.sum, attn_(in.normed));
  return {mid.sum, mlp_(mid.normed)};
}

}  // namespace voxfit::models
