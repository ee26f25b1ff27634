// The memory breakdown of real training steps of a small UNet under the CPU budget allocator:
// the parts add up to the measured peak, the tensor counts explain the live bytes at the start of
// the forward to within 2% of the peak, and checkpointing shows up in the per-block activations.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "voxfit/core/host_memory.h"
#include "voxfit/memory/cpu_budget.h"
#include "voxfit/memory/memory_breakdown.h"
#include "voxfit/train/step_memory.h"

namespace voxfit::train {
namespace {

constexpr int64_t kSide = 32;

models::ModelContext breakdown_unet(models::CheckpointMode checkpoint) {
  models::ModelContext ctx;
  ctx.patch = {kSide, kSide, kSide};
  ctx.num_classes = 3;
  ctx.checkpoint = checkpoint;
  ctx.params = {{"stages", "3"}, {"base_features", "8"}, {"max_features", "32"}};
  return ctx;
}

// Host memory, as the loader's batches are: the step's device copy is what the budget charges.
data::Batch breakdown_batch(int64_t batch) {
  const HostMemoryScope host;
  auto gen = torch::make_generator<at::CPUGeneratorImpl>(7);
  return {torch::randn({batch, 1, kSide, kSide, kSide}, gen),
          torch::randint(0, 3, {batch, 1, kSide, kSide, kSide}, gen, torch::kLong)};
}

// Three AdamW steps at `batch` under an uncapped (counting) CPU budget; the breakdown of them all.
memory::MemoryBreakdown measured_breakdown(int64_t batch, models::CheckpointMode checkpoint) {
  const memory::ScopedCpuBudget budget;
  memory::MemoryTracker tracker(torch::kCPU);
  torch::manual_seed(5);
  StepOptions so;
  so.optimizer = OptimizerOptions::defaults_for(OptimizerKind::kAdamW);
  so.spatial_augment.reset();
  TrainStep step(models::make_model("unet3d", breakdown_unet(checkpoint)), torch::kCPU, so, &tracker);
  tracker.watch_parameters(step.trainable_parameters());
  const data::Batch b = breakdown_batch(batch);
  tracker.reset();
  for (int i = 0; i < 3; ++i) step.run(b, 1e-3, i);
  return step_breakdown(tracker, step, b);
}

std::int64_t activation_sum(const memory::MemoryBreakdown& b) {
  std::int64_t n = 0;
  for (const auto& p : b.parts)
    if (p.group == "activations" && p.name != "other activations") n += p.bytes;
  return n;
}

TEST(StepMemory, PartsAddUpToThePeakOfASmallUNet) {
  const auto b = measured_breakdown(2, models::CheckpointMode::kNone);
  ASSERT_GT(b.peak_allocated, 0u);
  std::int64_t sum = 0;
  for (const auto& p : b.parts) sum += p.bytes;
  EXPECT_EQ(sum, static_cast<std::int64_t>(b.peak_allocated));
  // The stated tolerance: the tensors counted (static, batch) explain the live bytes when the
  // forward begins to within 1% of the peak.
  EXPECT_LT(b.unattributed_share(), 0.01) << nlohmann::json(b.to_json()).dump(1);
  // What the blocks retained is most of the activations; outside them only the loss and heads.
  const auto other = b.parts[b.parts.size() - 2];
  ASSERT_EQ(other.name, "other activations");
  EXPECT_LT(std::llabs(other.bytes), activation_sum(b) / 4) << nlohmann::json(b.to_json()).dump(1);
  EXPECT_EQ(b.peak_phase, "backward");
  EXPECT_GE(b.part_bytes("workspace"), 0);
}

TEST(StepMemory, StaticPartsAndGradientsMatchTheTensors) {
  const auto b = measured_breakdown(1, models::CheckpointMode::kNone);
  auto net = models::make_model("unet3d", breakdown_unet(models::CheckpointMode::kNone));
  const auto param_bytes = static_cast<std::uint64_t>(models::count_parameters(*net)) * 4;
  EXPECT_EQ(memory::total_bytes(b.statics.parameters), param_bytes);
  EXPECT_EQ(b.statics.parameters.at("float32"), param_bytes);
  // AdamW: two fp32 moments a parameter plus its step counter.
  EXPECT_GE(memory::total_bytes(b.statics.optimizer_state), 2 * param_bytes);
  EXPECT_LT(memory::total_bytes(b.statics.optimizer_state), 2 * param_bytes + 1024);
  // Every parameter has a gradient but the lowest deep-supervision head's (weight 0 in the loss)
  // and, with the fused kernels (the default), the conv biases an instance norm cancels
  // (models::norm_cancels_conv_bias: those of the conv stacks, "encoder1.conv0.bias").
  std::uint64_t unused = 0, cancelled = 0;
  for (const auto& p : net->named_parameters()) {
    const std::string& name = p.key();
    const auto bytes = static_cast<std::uint64_t>(p.value().numel()) * 4;
    if (name.rfind("seg0.", 0) == 0) unused += bytes;
    const bool stack = name.rfind("encoder", 0) == 0 || name.rfind("decoder", 0) == 0;
    if (stack && name.find(".conv") != std::string::npos && name.size() > 5 &&
        name.compare(name.size() - 5, 5, ".bias") == 0)
      cancelled += bytes;
  }
  ASSERT_GT(unused, 0u);
  ASSERT_GT(cancelled, 0u);
  EXPECT_EQ(memory::total_bytes(b.gradients), param_bytes - unused - cancelled);
  EXPECT_EQ(b.part_bytes("inputs"), kSide * kSide * kSide * (4 + 8));
}

TEST(StepMemory, BlocksRetainTheirSavedTensorsAndCheckpointingKeepsOnlyOutputs) {
  const auto plain = measured_breakdown(2, models::CheckpointMode::kNone);
  const auto all = measured_breakdown(2, models::CheckpointMode::kAll);
  std::vector<std::string> names;
  for (const auto& p : plain.parts)
    if (p.group == "activations") names.push_back(p.name);
  const std::vector<std::string> expected{"encoder0", "encoder1", "encoder2",
                                          "decoder0", "decoder1", "other activations"};
  EXPECT_EQ(names, expected);
  // Encoder stage 0 (two conv-norm-act units of 8 channels at full resolution) keeps at least
  // its output and each conv's input: more than twice its output.
  const std::int64_t out0 = 2 * 8 * kSide * kSide * kSide * 4;
  EXPECT_GT(plain.parts[6].bytes, 2 * out0);
  // Checkpointed, each stage keeps its output alone (its input belongs to the stage before).
  ASSERT_EQ(all.parts[6].name, "encoder0");
  EXPECT_EQ(all.parts[6].bytes, out0);
  EXPECT_LT(activation_sum(all), activation_sum(plain) / 2);
  EXPECT_LT(all.peak_allocated, plain.peak_allocated);
}

}  // namespace
}  // namespace voxfit::train
