#include "voxfit/models/memory_estimate.h"

#include <c10/core/ScalarType.h>

#include <algorithm>
#include <optional>

#include "voxfit/core/error.h"
#include "voxfit/models/attention.h"
#include "voxfit/models/checkpoint.h"
#include "voxfit/models/nets/swin_unetr.h"
#include "voxfit/models/nets/unet3d.h"
#include "voxfit/models/nets/unetr.h"

namespace voxfit::models {

std::int64_t total_bytes(const DtypeByteCounts& bytes) {
  std::int64_t n = 0;
  for (const auto& [dtype, b] : bytes) n += b;
  return n;
}

std::string dtype_name(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat:
      return "float32";
    case c10::kHalf:
      return "float16";
    case c10::kBFloat16:
      return "bfloat16";
    case c10::kDouble:
      return "float64";
    case c10::kLong:
      return "int64";
    case c10::kInt:
      return "int32";
    case c10::kBool:
      return "bool";
    default:
      return c10::toString(dtype);
  }
}

std::int64_t ActivationEstimate::total() const {
  std::int64_t n = 0;
  for (const auto& b : blocks) n += b.total();
  return n;
}

namespace {

using c10::ScalarType;

// Charges the tensors a forward keeps to the block open when they are made; the op rules of the
// header, one member each.
class Tally {
 public:
  Tally(ScalarType compute, std::int64_t batch, const KernelPaths& paths) : c_(compute), batch_(batch), paths_(paths) {}

  ScalarType compute() const { return c_; }
  const KernelPaths& paths() const { return paths_; }
  bool autocast() const { return c_ != c10::kFloat; }
  std::int64_t batch() const { return batch_; }

  void block(const std::string& name) { est_.blocks.push_back({name, {}, 0, 0, 0}); }

  // A new tensor of `elements` per sample that stays live until the block ends.
  void keep(std::int64_t elements, ScalarType dtype) {
    const std::int64_t bytes = batch_ * elements * static_cast<std::int64_t>(c10::elementSize(dtype));
    auto& block = est_.blocks.back();
    block.bytes[dtype_name(dtype)] += bytes;
    block.largest = std::max(block.largest, bytes);
    est_.largest_tensor = std::max(est_.largest_tensor, bytes);
  }
  // One that is not batched (autocast's weight copies).
  void keep_unbatched(std::int64_t elements, ScalarType dtype) {
    est_.blocks.back().bytes[dtype_name(dtype)] += elements * static_cast<std::int64_t>(c10::elementSize(dtype));
  }

  // Convolution or linear layer of `weights` parameters reading `in` elements of dtype `in_dtype`:
  // under autocast the weights' copy and a cast of the input; the output (`out` elements of the
  // compute dtype) is the caller's to keep or not. Returns the output dtype.
  ScalarType matmul_layer(std::int64_t weights, std::int64_t in, ScalarType in_dtype) {
    est_.blocks.back().parameters += weights;
    if (autocast()) {
      keep_unbatched(weights, c_);
      if (in_dtype != c_) keep(in, c_);
    }
    return c_;
  }
  // Instance norm over `channels`: per (sample, channel) statistics and, affine, the weight
  // repeated per sample (batch_norm's backward reads it; the repeated bias is freed).
  void instance_norm(std::int64_t channels, bool affine) { keep((affine ? 3 : 2) * channels, c10::kFloat); }
  // Layer norm over `rows` rows: mean and rstd per row; the output is the caller's.
  void layer_norm(std::int64_t rows) { keep(2 * rows, c10::kFloat); }
  // The dtype in which a layer norm of an `input` tensor keeps it for backward and returns its
  // output: ATen under autocast casts to float32; kernels::layer_norm (the transformers' norms on the
  // fused path) keeps and returns the input's dtype. A float32 input stays float32 either way.
  ScalarType layer_norm_dtype(ScalarType input) const {
    return autocast() && !paths_.fused_kernels ? c10::kFloat : input;
  }

  void output(std::int64_t elements, ScalarType dtype) {
    keep(elements, dtype);
    est_.outputs[dtype_name(dtype)] += batch_ * elements * static_cast<std::int64_t>(c10::elementSize(dtype));
  }

  ActivationEstimate finish() { return std::move(est_); }

 private:
  ScalarType c_;
  std::int64_t batch_;
  KernelPaths paths_;
  ActivationEstimate est_;
};

std::int64_t conv_weights(std::int64_t in, std::int64_t out, std::int64_t kernel, bool bias) {
  return in * out * kernel * kernel * kernel + (bias ? out : 0);
}

// Where an instance norm's output goes: to the next convolution (which keeps it), into a later
// residual add as its residual (a projection), or into the residual add that follows it.
enum class NormOut { kKept, kResidual, kIntoAdd };

// conv + instance norm + in-place activation at `voxels` (per sample), reading `in` channels at
// `in_voxels` of `in_dtype`. ATen's norm keeps its input (the conv output); the norm output stays
// where the next conv keeps it; the add after a norm keeps nothing (its output, activated in
// place, is the caller's to count). The fused norm (kernels::instance_norm_act) without affine
// parameters keeps its output instead of its input, and with a residual the residual (counted
// where it was made): then the conv output is never kept, and a projection's output is.
void conv_norm_act(Tally& t, std::int64_t in, std::int64_t out, std::int64_t in_voxels, std::int64_t voxels,
                   ScalarType in_dtype, std::int64_t kernel, bool bias, bool affine,
                   NormOut norm_out = NormOut::kKept) {
  const ScalarType c = t.matmul_layer(conv_weights(in, out, kernel, bias), in * in_voxels, in_dtype);
  const bool keeps_output = t.paths().fused_kernels && !affine;
  if (!keeps_output) t.keep(out * voxels, c);
  t.instance_norm(out, affine);
  if (norm_out == NormOut::kKept || (keeps_output && norm_out == NormOut::kResidual)) t.keep(out * voxels, c);
}

// MONAI's UnetResBlock / UnetBasicBlock (models::UnetBlock), in -> out channels at `voxels`.
// Returns its output's dtype: the add of an unprojected input of another dtype promotes.
ScalarType unet_block(Tally& t, std::int64_t in, std::int64_t out, std::int64_t voxels, ScalarType in_dtype,
                      bool residual) {
  conv_norm_act(t, in, out, voxels, voxels, in_dtype, 3, false, false);
  if (!residual) {
    conv_norm_act(t, out, out, voxels, voxels, t.compute(), 3, false, false);
    return t.compute();
  }
  // The projection's norm output is the residual; the last norm's goes into the add, whose output
  // (activated in place) is what stays.
  if (in != out) conv_norm_act(t, in, out, voxels, voxels, in_dtype, 1, false, false, NormOut::kResidual);
  conv_norm_act(t, out, out, voxels, voxels, t.compute(), 3, false, false, NormOut::kIntoAdd);
  const ScalarType sum = in != out ? t.compute() : c10::promoteTypes(t.compute(), in_dtype);
  t.keep(out * voxels, sum);
  return sum;
}

// MONAI's UnetrUpBlock: a transposed conv (x2) of `in` channels of `in_dtype` to `out` at `voxels`,
// concatenated with a skip of `skip_dtype` (cat promotes), then UnetBlock(2 out -> out). The
// transposed conv's output goes into the concatenation only; the concatenation stays.
ScalarType up_block(Tally& t, std::int64_t in, std::int64_t out, std::int64_t voxels, ScalarType in_dtype,
                    ScalarType skip_dtype, bool residual) {
  t.matmul_layer(conv_weights(in, out, 2, false), in * (voxels >> 3), in_dtype);
  if (t.paths().lean_decoders) {  // kernels::convs_of_concat: the upsampled part is kept (and a skip cast to it)
    t.keep(out * voxels, t.compute());
    if (t.autocast() && skip_dtype != t.compute()) t.keep(out * voxels, t.compute());
    return unet_block(t, 2 * out, out, voxels, t.compute(), residual);
  }
  const ScalarType cat = c10::promoteTypes(t.compute(), skip_dtype);
  t.keep(2 * out * voxels, cat);
  return unet_block(t, 2 * out, out, voxels, cat, residual);
}

ActivationEstimate estimate_unet3d(const UNet3DImpl& net, const std::vector<std::int64_t>& shape, ScalarType c,
                                   const KernelPaths& paths, CheckpointMode mode) {
  const auto& o = net.options();
  Tally t(c, shape[0], paths);
  std::vector<std::int64_t> features;
  for (std::int64_t s = 0; s < o.stages(); ++s)
    features.push_back(std::min(o.base_features() << std::min<std::int64_t>(s, 20), o.max_features()));
  const auto voxels = [&](std::int64_t s) { return (shape[2] >> s) * (shape[3] >> s) * (shape[4] >> s); };
  const bool affine = o.norm() == "instance_affine";
  const auto stack = [&](std::int64_t in, std::int64_t out, std::int64_t in_voxels, std::int64_t v, ScalarType dt,
                         bool checkpointed) {
    if (checkpointed) {
      t.keep(out * v, t.compute());
      return;
    }
    for (std::int64_t i = 0; i < o.convs_per_stage(); ++i)
      conv_norm_act(t, i == 0 ? in : out, out, i == 0 ? in_voxels : v, v, i == 0 ? dt : t.compute(), 3, true, affine);
  };
  const bool main = checkpoints(mode, true), rest = checkpoints(mode, false);
  for (std::int64_t s = 0; s < o.stages(); ++s) {
    t.block("encoder" + std::to_string(s));
    stack(s == 0 ? o.in_channels() : features[s - 1], features[s], voxels(s == 0 ? 0 : s - 1), voxels(s),
          s == 0 ? c10::kFloat : t.compute(), main);
  }
  const std::int64_t n = o.stages() - 1;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t below = features[n - i], skip = features[n - 1 - i], v = voxels(n - 1 - i);
    t.block("decoder" + std::to_string(i));
    // The transposed conv's output goes into the concatenation only; the concatenation stays.
    if (!rest) {
      t.matmul_layer(conv_weights(below, skip, 2, true), below * voxels(n - i), t.compute());
      // Lean decoders keep the upsampled part, not the concatenation.
      t.keep((t.paths().lean_decoders ? 1 : 2) * skip * v, t.compute());
    }
    stack(2 * skip, skip, v, v, t.compute(), rest);
    if (o.deep_supervision() || i + 1 == n) {
      t.matmul_layer(conv_weights(skip, o.num_classes(), 1, true), skip * v, t.compute());
      t.output(o.num_classes() * v, t.compute());
    }
  }
  return t.finish();
}

// A pre-norm layer norm over `tokens` rows whose input has the residual stream's dtype: ATen under
// autocast runs it in float32, so a half-precision input is cast first and the cast is what it
// saves. kernels::layer_norm (every transformer's norms on the fused path) keeps the input as given,
// which the caller counts as the stream's.
void pre_norm(Tally& t, std::int64_t tokens, std::int64_t hidden, ScalarType stream) {
  if (t.layer_norm_dtype(stream) != stream) t.keep(tokens * hidden, c10::kFloat);
  t.layer_norm(tokens);
}

// A linear layer reading a float32 layer-norm output of `in` elements: the output itself is what
// it saves, or under autocast its cast copy.
void linear_after_norm(Tally& t, std::int64_t weights, std::int64_t in) {
  t.matmul_layer(weights, in, c10::kFloat);
  if (!t.autocast()) t.keep(in, c10::kFloat);
}

// Attention of `queries` tokens each over `keys` tokens (windows: keys = window tokens), from the
// first norm's output through the output projection. `bias_elements`: an additive bias the fused
// kernel keeps (unbatched; 0 for none).
void attention_half(Tally& t, std::int64_t queries, std::int64_t keys, std::int64_t hidden, std::int64_t heads,
                    bool qkv_bias, AttentionMode attention, std::int64_t bias_elements) {
  const ScalarType c = t.compute(), f32 = c10::kFloat;
  const std::int64_t tc = queries * hidden;
  linear_after_norm(t, 3 * hidden * hidden + (qkv_bias ? 3 * hidden : 0), tc);
  if (resolve_attention(attention) == AttentionMode::kSdpa) {
    t.keep(3 * tc, c);             // qkv: q, k, v are views of it
    t.keep(tc, c);                 // the attention output
    t.keep(heads * queries, f32);  // its log-sum-exp
    t.keep_unbatched(bias_elements, c);
  } else {
    t.keep(3 * tc, c);                                    // matmul's contiguous copies of q * scale, k^T and v
    t.keep(heads * queries * keys, f32);                  // softmax output
    if (t.autocast()) t.keep(heads * queries * keys, c);  // its cast for the second matmul
  }
  t.keep(tc, c);  // [tokens, C] copy the projection reads
  t.matmul_layer(hidden * hidden + hidden, tc, c);
}

// x + attention, then the pre-norm MLP and its residual add; both sums in the stream's dtype.
void mlp_half(Tally& t, std::int64_t tokens, std::int64_t hidden, std::int64_t mlp, ScalarType stream) {
  const std::int64_t tc = tokens * hidden;
  t.keep(tc, stream);  // x + attention: the second norm's input
  pre_norm(t, tokens, hidden, stream);
  linear_after_norm(t, hidden * mlp + mlp, tc);
  t.keep(2 * tokens * mlp, t.compute());  // fc1 output (GELU's input) and GELU's output (fc2's)
  t.matmul_layer(mlp * hidden + hidden, tokens * mlp, t.compute());
  t.keep(tc, stream);  // the block's output
}

// One pre-norm transformer block on `tokens` x `hidden` float32 tokens (UNETR's ViT).
void transformer_block(Tally& t, std::int64_t tokens, std::int64_t hidden, std::int64_t mlp, std::int64_t heads,
                       bool qkv_bias, AttentionMode attention) {
  pre_norm(t, tokens, hidden, c10::kFloat);
  attention_half(t, tokens, tokens, hidden, heads, qkv_bias, attention, 0);
  mlp_half(t, tokens, hidden, mlp, c10::kFloat);
}

ActivationEstimate estimate_unetr(const UNETRImpl& net, const std::vector<std::int64_t>& shape, ScalarType c,
                                  const KernelPaths& paths, CheckpointMode mode) {
  const auto& o = net.options();
  Tally t(c, shape[0], paths);
  const std::int64_t p = UNETRImpl::kPatch, f = o.feature_size(), hidden = o.hidden_size(), k = o.num_classes();
  const std::int64_t grid = (shape[2] / p) * (shape[3] / p) * (shape[4] / p), voxels = shape[2] * shape[3] * shape[4];
  const auto at = [&](int doublings) { return grid << (3 * doublings); };  // voxels after x2 upsamplings
  const bool main = checkpoints(mode, true), rest = checkpoints(mode, false);
  t.block("patch_embed");
  t.matmul_layer(conv_weights(o.in_channels(), hidden, p, true), o.in_channels() * voxels, c10::kFloat);
  t.keep(grid * hidden, c10::kFloat);  // conv output + the float32 position embedding
  for (std::int64_t i = 0; i < o.num_layers(); ++i) {
    t.block("transformer" + std::to_string(i));
    if (main)
      t.keep(grid * hidden, c10::kFloat);
    else
      transformer_block(t, grid, hidden, o.mlp_dim(), o.num_heads(), o.qkv_bias(), o.attention());
  }
  t.block("norm");
  t.layer_norm(grid);
  t.keep(grid * hidden, c10::kFloat);
  // tokens -> volume: a float32 copy the first conv reads; under autocast its cast copy stays
  // instead, except in front of a checkpointed block, which keeps its input as given.
  const auto volume = [&] {
    if (!t.autocast() || rest) t.keep(grid * hidden, c10::kFloat);
  };
  const auto block = [&](std::int64_t in, std::int64_t out, std::int64_t v, ScalarType dt) {
    unet_block(t, in, out, v, dt, o.res_block());
  };
  t.block("encoder1");
  if (rest)
    t.keep(f * voxels, t.compute());
  else
    block(o.in_channels(), f, voxels, c10::kFloat);
  for (int e = 2; e <= 4; ++e) {
    const std::int64_t out = f << (e - 1), layers = 4 - e;
    t.block("encoder" + std::to_string(e));
    volume();
    if (rest) {
      t.keep(out * at(1 + static_cast<int>(layers)), t.compute());
      continue;
    }
    t.matmul_layer(conv_weights(hidden, out, 2, false), hidden * grid, c10::kFloat);
    t.keep(out * at(1), t.compute());
    for (int l = 0; l < layers; ++l) {
      t.matmul_layer(conv_weights(out, out, 2, false), out * at(1 + l), t.compute());
      t.keep(out * at(2 + l), t.compute());
      block(out, out, at(2 + l), t.compute());
    }
  }
  for (int d = 5; d >= 2; --d) {
    const std::int64_t in = d == 5 ? hidden : f << (d - 1), out = f << (d - 2);
    const std::int64_t v = at(6 - d);
    t.block("decoder" + std::to_string(d));
    if (d == 5) volume();
    if (rest) {
      t.keep(out * v, t.compute());
      continue;
    }
    up_block(t, in, out, v, d == 5 ? c10::kFloat : t.compute(), t.compute(), o.res_block());
  }
  t.block("out");
  t.matmul_layer(conv_weights(f, k, 1, true), f * voxels, t.compute());
  t.output(k * voxels, t.compute());
  return t.finish();
}

}  // namespace

std::int64_t product(const Size3& s) { return s[0] * s[1] * s[2]; }

// One stage of the Swin encoder on a `size` grid of `dim` channels in the stream's dtype (the
// compute dtype: convolution and linear outputs and their sums), its blocks and patch merging.
// A shifted stage's attention mask [windows, n, n] (float32) is made on the first forward and then
// cached by the module; it is charged here, as the tracker's largest step (the first) sees it.
void swin_stage(Tally& t, const SwinUNETROptions& o, std::size_t stage, const Size3& size, std::int64_t dim, bool main,
                bool rest) {
  const ScalarType c = t.compute();
  const std::int64_t w = o.window_size(), tokens = product(size), mlp = static_cast<std::int64_t>(dim * o.mlp_ratio());
  const auto [window, shift] = window_and_shift(size, {w, w, w}, {w / 2, w / 2, w / 2});
  Size3 padded;
  for (int i = 0; i < 3; ++i) padded[i] = (size[i] + window[i] - 1) / window[i] * window[i];
  const std::int64_t n = product(window), windows = product(padded) / n, heads = o.num_heads()[stage];
  const bool shifts = shift[0] > 0 || shift[1] > 0 || shift[2] > 0;
  if (shifts) t.keep_unbatched(windows * n * n, c10::kFloat);
  for (std::int64_t b = 0; b < o.depths()[stage]; ++b) {
    if (main) {
      t.keep(tokens * dim, c);
      continue;
    }
    const bool masked = shifts && b % 2 == 1;
    pre_norm(t, tokens, dim, c);
    // The relative-position index of a shrunken window is a copy of part of the full one's.
    if (n < w * w * w) t.keep_unbatched(n * n, c10::kLong);
    attention_half(t, product(padded), n, dim, heads, o.qkv_bias(), o.attention(),
                   (masked ? windows : 1) * heads * n * n);
    mlp_half(t, tokens, dim, mlp, c);
  }
  if (rest) {
    t.keep(tokens * dim / 4, c);
    return;
  }
  // Patch merging: the 8-way concatenation (as the norm saves it: ATen under autocast casts it to
  // float32, kernels::layer_norm keeps it as it is), the norm's output, and the reduction's
  // [tokens / 8, 2 dim] output.
  t.keep(tokens * dim, t.layer_norm_dtype(c));
  t.layer_norm(tokens / 8);
  linear_after_norm(t, 8 * dim * 2 * dim, tokens * dim);
}

ActivationEstimate estimate_swin_unetr(const SwinUNETRImpl& net, const std::vector<std::int64_t>& shape, ScalarType c,
                                       const KernelPaths& paths, CheckpointMode mode) {
  const auto& o = net.options();
  if (o.use_v2()) throw UnsupportedError("no analytic memory model for swin_unetr with use_v2");
  Tally t(c, shape[0], paths);
  const ScalarType f32 = c10::kFloat;
  const bool main = checkpoints(mode, true), rest = checkpoints(mode, false);
  const std::int64_t f = o.feature_size(), voxels = shape[2] * shape[3] * shape[4];
  const auto at = [&](int halvings) { return voxels >> (3 * halvings); };
  t.block("swin_vit");
  t.matmul_layer(conv_weights(o.in_channels(), f, 2, true), o.in_channels() * voxels, f32);
  t.keep(f * at(1), c);  // the patch embedding: stage 0's input and the first hidden state
  // The hidden states: layer-normed over channels and made contiguous for the decoder. ATen's norm
  // returns float32 (a half input is cast and the cast saved), so the copy is float32 too;
  // kernels::layer_norm keeps its input as given and returns its dtype. Without normalize, the
  // stages' outputs are copied as they are. A merging output nothing else keeps is the norm's input.
  const auto hidden = [&](std::int64_t elements, std::int64_t channels, bool merged) {
    if (!o.normalize()) {
      if (merged) t.keep(elements, c);
      return c;
    }
    const ScalarType normed = t.layer_norm_dtype(c);
    if (normed != c)
      t.keep(elements, normed);  // the cast the norm keeps
    else if (merged && !rest)
      t.keep(elements, c);
    t.layer_norm(elements / channels);
    t.keep(elements, normed);
    return normed;
  };
  std::vector<ScalarType> dtypes = {hidden(f * at(1), f, false)};
  for (std::size_t s = 0; s < 4; ++s) {
    const std::int64_t dim = f << s;
    if (s > 0) t.keep(dim * at(1 + static_cast<int>(s)), c);  // the stage's contiguous input
    const std::int64_t side = 1 + static_cast<std::int64_t>(s);
    const Size3 size = {shape[2] >> side, shape[3] >> side, shape[4] >> side};
    swin_stage(t, o, s, size, dim, main, rest);
    dtypes.push_back(hidden(2 * dim * at(2 + static_cast<int>(s)), 2 * dim, true));
  }
  const auto block = [&](const char* name, std::int64_t in, std::int64_t out, std::int64_t v, ScalarType dt) {
    t.block(name);
    if (rest) {
      t.keep(out * v, c);
      return c;
    }
    return unet_block(t, in, out, v, dt, true);
  };
  const ScalarType e0 = block("encoder1", o.in_channels(), f, voxels, f32);
  const ScalarType e1 = block("encoder2", f, f, at(1), dtypes[0]);
  const ScalarType e2 = block("encoder3", 2 * f, 2 * f, at(2), dtypes[1]);
  const ScalarType e3 = block("encoder4", 4 * f, 4 * f, at(3), dtypes[2]);
  ScalarType dec = block("encoder10", 16 * f, 16 * f, at(5), dtypes[4]);
  const struct {
    const char* name;
    std::int64_t in, out;
    int level;
    ScalarType skip;
  } ups[] = {{"decoder5", 16 * f, 8 * f, 4, dtypes[3]},
             {"decoder4", 8 * f, 4 * f, 3, e3},
             {"decoder3", 4 * f, 2 * f, 2, e2},
             {"decoder2", 2 * f, f, 1, e1},
             {"decoder1", f, f, 0, e0}};
  for (const auto& up : ups) {
    t.block(up.name);
    if (rest)
      t.keep(up.out * at(up.level), c);
    else
      dec = up_block(t, up.in, up.out, at(up.level), dec, up.skip, true);
  }
  t.block("out");
  t.matmul_layer(conv_weights(f, o.num_classes(), 1, true), f * voxels, dec);
  t.output(o.num_classes() * voxels, c);
  return t.finish();
}

namespace {

ActivationEstimate walk(const NetworkImpl& net, const std::vector<std::int64_t>& shape, ScalarType compute,
                        const KernelPaths& paths, std::optional<CheckpointMode> override_mode) {
  if (const auto* unet = dynamic_cast<const UNet3DImpl*>(&net))
    return estimate_unet3d(*unet, shape, compute, paths, override_mode.value_or(unet->options().checkpoint()));
  if (const auto* unetr = dynamic_cast<const UNETRImpl*>(&net))
    return estimate_unetr(*unetr, shape, compute, paths, override_mode.value_or(unetr->options().checkpoint()));
  if (const auto* swin = dynamic_cast<const SwinUNETRImpl*>(&net))
    return estimate_swin_unetr(*swin, shape, compute, paths, override_mode.value_or(swin->options().checkpoint()));
  throw UnsupportedError("no analytic memory model for this network (unet3d, unetr and swin_unetr have one)");
}

}  // namespace

ActivationEstimate estimate_activations(const NetworkImpl& net, const std::vector<std::int64_t>& input_shape,
                                        ScalarType compute, const KernelPaths& paths) {
  net.check_input(input_shape);
  ActivationEstimate est = walk(net, input_shape, compute, paths, std::nullopt);
  // A checkpointed block keeps less than it would unchecked; what it would keep is what its
  // recomputation makes again in backward.
  const ActivationEstimate full = walk(net, input_shape, compute, paths, CheckpointMode::kNone);
  for (std::size_t i = 0; i < est.blocks.size(); ++i) {
    if (est.blocks[i].total() < full.blocks[i].total()) est.blocks[i].recomputed = full.blocks[i].total();
    est.blocks[i].largest = full.blocks[i].largest;
    est.blocks[i].parameters = full.blocks[i].parameters;
  }
  est.largest_tensor = full.largest_tensor;
  return est;
}

}  // namespace voxfit::models
