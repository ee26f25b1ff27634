// The analytic activation model (models::estimate_activations) against a network small enough to
// count every tensor its training forward keeps by hand.
#include <gtest/gtest.h>

#include "voxfit/core/error.h"
#include "voxfit/models/memory_estimate.h"

namespace voxfit::models {
namespace {

// unet3d with two stages of one conv each: features 2 and 4, 1 input channel, 2 classes, a 4^3
// patch, batch 1, affine instance norm (nnU-Net's); one decoder stage, whose head is the only output.
ModelContext hand_counted_unet(CheckpointMode checkpoint = CheckpointMode::kNone) {
  ModelContext ctx;
  ctx.patch = {4, 4, 4};
  ctx.num_classes = 2;
  ctx.checkpoint = checkpoint;
  ctx.params = {{"stages", "2"}, {"base_features", "2"}, {"max_features", "4"}, {"convs_per_stage", "1"}};
  return ctx;
}

std::int64_t block_bytes(const ActivationEstimate& e, const std::string& name, const std::string& dtype = "") {
  for (const auto& b : e.blocks) {
    if (b.name != name) continue;
    if (dtype.empty()) return b.total();
    const auto it = b.bytes.find(dtype);
    return it == b.bytes.end() ? 0 : it->second;
  }
  ADD_FAILURE() << "no block " << name;
  return -1;
}

// float32, in elements (x 4 bytes):
// encoder0: conv 1->2 at 4^3            output [1,2,4,4,4]               128  (the norm saves it)
//           instance norm                 mean + inv std, 2 channels each  4
//                                         affine weight repeated per sample 2 (the repeated bias: freed)
//                                         output (leaky ReLU in place)     128  (saved by it and the next conv)
//                                                                 total 262 = 1048 B
// encoder1: conv 2->4 stride 2 at 2^3    output 32, stats 8 + weight 4, output 32 = 76 = 304 B
// decoder0: transposed conv 4->2 at 4^3  output 128: read by the cat only, which saves nothing: freed
//           cat with encoder0's output   [1,4,4,4,4]                      256
//           conv 4->2 + norm + act       128 + 4 + 2 + 128                262
//           head 1x1 conv 2->2           output [1,2,4,4,4]               128  (a network output)
//                                                                 total 646 = 2584 B
// (A real step on the CPU measures these three blocks alike: `voxfit models --model unet3d --patch 4
// --classes 2 --stages 2 --base-features 2 --max-features 4 --convs-per-stage 1 --memory --measure`.)
// Outputs: the head's 128 floats (512 B). Largest tensor: the cat, 1024 B.
TEST(MemoryEstimate, CountsEveryTensorOfATinyUNetByHand) {
  const Network net = make_model("unet3d", hand_counted_unet());
  const ActivationEstimate e = estimate_activations(*net, {1, 1, 4, 4, 4});
  ASSERT_EQ(e.blocks.size(), 3u);
  EXPECT_EQ(e.blocks[0].name, "encoder0");
  EXPECT_EQ(e.blocks[2].name, "decoder0");
  EXPECT_EQ(block_bytes(e, "encoder0"), 1048);
  EXPECT_EQ(block_bytes(e, "encoder1"), 304);
  EXPECT_EQ(block_bytes(e, "decoder0"), 2584);
  EXPECT_EQ(total_bytes(e.outputs), 512);
  EXPECT_EQ(e.largest_tensor, 1024);
  EXPECT_EQ(e.total(), 1048 + 304 + 2584);
  for (const auto& b : e.blocks) EXPECT_EQ(b.recomputed, 0) << b.name;

  // Batch 3 triples everything batched; nothing here is unbatched in float32.
  EXPECT_EQ(estimate_activations(*net, {3, 1, 4, 4, 4}).total(), 3 * e.total());
}

// The fused CUDA paths, float32: with lean decoders the same tiny UNet keeps, in decoder0, the
// transposed conv's output (128 floats, which kernels::convs_of_concat keeps) instead of the cat
// (256): 512 B less there; its affine norms keep their input as the ATen ones do, so the encoders are unchanged.
// UNETR's norms have no affine parameters: a norm keeps its output (and a residual added after
// it), so no conv output (a norm's input) is kept.
TEST(MemoryEstimate, TheFusedPathKeepsTheDecodersPartsAndNoNormInput) {
  const Network net = make_model("unet3d", hand_counted_unet());
  const ActivationEstimate aten = estimate_activations(*net, {1, 1, 4, 4, 4});
  const ActivationEstimate fused = estimate_activations(*net, {1, 1, 4, 4, 4}, c10::kFloat, {true, true});
  EXPECT_EQ(block_bytes(fused, "encoder0"), block_bytes(aten, "encoder0"));
  EXPECT_EQ(block_bytes(fused, "encoder1"), block_bytes(aten, "encoder1"));
  EXPECT_EQ(block_bytes(fused, "decoder0"), 2584 - 512);

  ModelContext unetr;
  unetr.patch = {32, 32, 32};
  unetr.num_classes = 3;
  unetr.params = {{"feature_size", "4"}, {"hidden_size", "24"}, {"mlp_dim", "48"}, {"num_heads", "2"}};
  const Network small = make_model("unetr", unetr);
  const ActivationEstimate a = estimate_activations(*small, {1, 1, 32, 32, 32});
  const ActivationEstimate f = estimate_activations(*small, {1, 1, 32, 32, 32}, c10::kFloat, {true, true});
  const ActivationEstimate norms_only = estimate_activations(*small, {1, 1, 32, 32, 32}, c10::kFloat, {true, false});
  // decoder2 works at 32^3 with 4 channels: UpBlock(8 -> 4) = transposed conv, cat of 2 x 4
  // channels, a residual block 8 -> 4 (conv1 + norm1 + LeakyReLU: plain; conv2 + norm2 + the
  // projection's add; conv3 + norm3: the projection). Fused norms keep neither conv1's nor conv2's
  // output (norm2 keeps the residual, which norm3 keeps as its output, not conv3's): 8 channels x
  // 32^3 floats less; keeping the decoder's parts makes the cat (8 channels) the transposed conv's
  // output (4): 4 more.
  EXPECT_EQ(block_bytes(a, "decoder2") - block_bytes(norms_only, "decoder2"), 8 * 32 * 32 * 32 * 4);
  EXPECT_EQ(block_bytes(a, "decoder2") - block_bytes(f, "decoder2"), 12 * 32 * 32 * 32 * 4);
  EXPECT_LT(f.total(), a.total());
}

// bfloat16 autocast, in bytes: convolutions compute in bf16 (2 B), norm statistics stay float32,
// autocast keeps a bf16 copy of each weight (and bias) and casts a float32 input once per conv.
// encoder0: weight copy (1*2*27 + 2) * 2 = 112, input cast 64 * 2 = 128, conv output 256,
//           norm output 256 -> bf16 752; stats 16 + repeated weight 8 -> float32 24
// encoder1: weight copy (2*4*27 + 4) * 2 = 440, conv output 64, norm output 64 -> bf16 568;
//           float32 32 + 16 = 48
// decoder0: transposed conv weight copy (4*2*8 + 2) * 2 = 132, cat 512, conv weight copy
//           (4*2*27 + 2) * 2 = 436, conv output 256, norm output 256, head weight copy (2*2 + 2) * 2
//           = 12, head output 256 -> bf16 1860; float32 16 + 8 = 24
TEST(MemoryEstimate, AutocastKeepsHalfPrecisionConvTensorsAndFloatStatistics) {
  const Network net = make_model("unet3d", hand_counted_unet());
  const ActivationEstimate e = estimate_activations(*net, {1, 1, 4, 4, 4}, c10::kBFloat16);
  EXPECT_EQ(block_bytes(e, "encoder0", "bfloat16"), 752);
  EXPECT_EQ(block_bytes(e, "encoder0", "float32"), 24);
  EXPECT_EQ(block_bytes(e, "encoder1", "bfloat16"), 568);
  EXPECT_EQ(block_bytes(e, "encoder1", "float32"), 48);
  EXPECT_EQ(block_bytes(e, "decoder0", "bfloat16"), 1860);
  EXPECT_EQ(block_bytes(e, "decoder0", "float32"), 24);
  EXPECT_EQ(e.outputs.at("bfloat16"), 256);
}

// Checkpointed, each block keeps its output alone (decoder0: the stage's 128 floats and the head's
// 128, the head being outside the checkpoint), and records what its recomputation makes again.
TEST(MemoryEstimate, CheckpointedBlocksKeepTheirOutputsAndRecomputeTheRest) {
  const Network net = make_model("unet3d", hand_counted_unet(CheckpointMode::kAll));
  const ActivationEstimate e = estimate_activations(*net, {1, 1, 4, 4, 4});
  EXPECT_EQ(block_bytes(e, "encoder0"), 512);
  EXPECT_EQ(block_bytes(e, "encoder1"), 128);
  EXPECT_EQ(block_bytes(e, "decoder0"), 1024);
  EXPECT_EQ(e.blocks[0].recomputed, 1048);
  EXPECT_EQ(e.blocks[1].recomputed, 304);
}

TEST(MemoryEstimate, NetworksWithoutAModelAndBadInputsAreErrors) {
  ModelContext resnet = find_model("resnet50").defaults;
  resnet.params = {{"blocks_per_stage", "1,1,1,1"}};
  const Network classifier = make_model("resnet50", resnet);
  EXPECT_THROW(estimate_activations(*classifier, {1, 3, 224, 224}), UnsupportedError);
  const Network net = make_model("unet3d", hand_counted_unet());
  EXPECT_THROW(estimate_activations(*net, {1, 1, 4, 4, 5}), ModelError);
}

}  // namespace
}  // namespace voxfit::models
