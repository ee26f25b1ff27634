#pragma once
// The pre-norm ViT transformer block shared by ViT-B/16 (timm) and UNETR's encoder (MONAI):
// x + attn(norm1(x)), then x + mlp(norm2(x)).
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include "voxfit/models/network.h"

namespace voxfit::models {

struct TransformerBlockOptions {
  /// Token width.
  TORCH_ARG(int64_t, hidden_size) = 768;
  /// Hidden width of the MLP.
  TORCH_ARG(int64_t, mlp_dim) = 3072;
  /// Attention heads; must divide hidden_size.
  TORCH_ARG(int64_t, num_heads) = 12;
  /// Bias on the q/k/v projection (timm: on; MONAI's UNETR: off).
  TORCH_ARG(bool, qkv_bias) = false;
  /// LayerNorm epsilon (timm's ViT: 1e-6; MONAI: 1e-5).
  TORCH_ARG(double, norm_eps) = 1e-5;
  TORCH_ARG(AttentionMode, attention) = AttentionMode::kAuto;
};

/// Multi-head self-attention over [B, L, C] tokens: qkv linear, attention(), output projection.
class SelfAttentionImpl : public torch::nn::Module {
 public:
  explicit SelfAttentionImpl(const TransformerBlockOptions& options);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int64_t heads_;
  AttentionMode mode_;
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr};
};
TORCH_MODULE(SelfAttention);

/// Linear - GELU - Linear.
class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(int64_t dim, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
  torch::nn::GELU act_;
};
TORCH_MODULE(Mlp);

class TransformerBlockImpl : public torch::nn::Module {
 public:
  explicit TransformerBlockImpl(const TransformerBlockOptions& options);
  torch::Tensor forward(const torch::Tensor& x);

  /// The block's output as two terms, {stream', update} with output = stream' + update, for the
  /// input stream + pending (pending undefined: the input is stream). Each residual add then runs
  /// in the kernel of the norm that follows it (models::apply_add_layer_norm): the next block's
  /// first, or the encoder's last norm. forward(x) is the sum of forward_parts(x, {}).
  std::pair<torch::Tensor, torch::Tensor> forward_parts(const torch::Tensor& stream, const torch::Tensor& pending);

 private:
  torch::nn::LayerNorm norm1_{nullptr}, norm2_{nullptr};
  SelfAttention attn_{nullptr};
  Mlp mlp_{nullptr};
};
TORCH_MODULE(TransformerBlock);

}  // namespace voxfit::models
