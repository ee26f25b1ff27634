#include "activation_rules.h"

#include "voxfit/models/attention.h"

namespace voxfit::models::rules {

std::int64_t conv_weights(std::int64_t in, std::int64_t out, std::int64_t kernel, bool bias) {
  return in * out * kernel * kernel * kernel + (bias ? out : 0);
}

void conv_norm_act(Tally& t, std::int64_t in, std::int64_t out, std::int64_t in_voxels, std::int64_t voxels,
                   ScalarType in_dtype, std::int64_t kernel, bool bias, bool affine, NormOut norm_out) {
  conv_norm_act_weights(t, conv_weights(in, out, kernel, bias), in, out, in_voxels, voxels, in_dtype, affine, norm_out);
}

void conv_norm_act_weights(Tally& t, std::int64_t weights, std::int64_t in, std::int64_t out, std::int64_t in_voxels,
                           std::int64_t voxels, ScalarType in_dtype, bool affine, NormOut norm_out) {
  const ScalarType c = t.matmul_layer(weights, in * in_voxels, in_dtype);
  const bool keeps_output = t.paths().fused_kernels && !affine;
  if (!keeps_output) t.keep(out * voxels, c);
  t.instance_norm(out, affine);
  if (norm_out == NormOut::kKept || (keeps_output && norm_out == NormOut::kResidual)) t.keep(out * voxels, c);
}

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

void pre_norm(Tally& t, std::int64_t tokens, std::int64_t hidden, ScalarType stream) {
  if (t.layer_norm_dtype(stream) != stream) t.keep(tokens * hidden, c10::kFloat);
  t.layer_norm(tokens);
}

void linear_after_norm(Tally& t, std::int64_t weights, std::int64_t in) {
  t.matmul_layer(weights, in, c10::kFloat);
  if (!t.autocast()) t.keep(in, c10::kFloat);
}

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

void mlp_half(Tally& t, std::int64_t tokens, std::int64_t hidden, std::int64_t mlp, ScalarType stream) {
  const std::int64_t tc = tokens * hidden;
  t.keep(tc, stream);  // x + attention: the second norm's input
  pre_norm(t, tokens, hidden, stream);
  linear_after_norm(t, hidden * mlp + mlp, tc);
  t.keep(2 * tokens * mlp, t.compute());  // fc1 output (GELU's input) and GELU's output (fc2's)
  t.matmul_layer(mlp * hidden + hidden, tokens * mlp, t.compute());
  t.keep(tc, stream);  // the block's output
}

void transformer_block(Tally& t, std::int64_t tokens, std::int64_t hidden, std::int64_t mlp, std::int64_t heads,
                       bool qkv_bias, AttentionMode attention) {
  pre_norm(t, tokens, hidden, c10::kFloat);
  attention_half(t, tokens, tokens, hidden, heads, qkv_bias, attention, 0);
  mlp_half(t, tokens, hidden, mlp, c10::kFloat);
}

}  // namespace voxfit::models::rules
