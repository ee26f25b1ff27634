#include "voxfit/models/nets/segresnet_ds.h"

#include <torch/torch.h>

#include "voxfit/core/block_scope.h"
#include "voxfit/core/error.h"
#include "voxfit/models/blocks/layers.h"
#include "voxfit/models/checkpoint.h"
#include "voxfit/models/shape_checks.h"

#include "../activation_rules.h"
#include "../monai_naming.h"
#include "../registry_support.h"

namespace voxfit::models {

namespace nn = torch::nn;

namespace {
nn::Conv3d conv3(int64_t in, int64_t out, int64_t stride = 1) {
  return nn::Conv3d(nn::Conv3dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}
}  // namespace

SegResBlockImpl::SegResBlockImpl(int64_t channels, const std::string& norm)
    : norm1_(make_norm(norm, 3, channels)), norm2_(make_norm(norm, 3, channels)) {
  register_module("norm1", norm1_.ptr());
  conv1_ = register_module("conv1", conv3(channels, channels));
  register_module("norm2", norm2_.ptr());
  conv2_ = register_module("conv2", conv3(channels, channels));
}

torch::Tensor SegResBlockImpl::forward(const torch::Tensor& x) {
  // Pre-activation: the instance norms and their ReLU are kernels::instance_norm_act's one pass.
  auto y = conv1_(apply_norm_act(norm1_, "relu", x));
  return conv2_(apply_norm_act(norm2_, "relu", y)).add_(x);
}

SegResNetDSImpl::SegResNetDSImpl(const SegResNetDSOptions& o) : options_(o) {
  const auto& blocks = o.blocks_down();
  const auto levels = static_cast<int64_t>(blocks.size());
  if (o.norm_name() != "instance_affine" && o.norm_name() != "batch")
    throw ConfigError("--norm-name (segresnet_ds): expected instance_affine or batch, got '" + o.norm_name() + "'");
  if (levels < 2)
    throw ConfigError("--blocks-down (segresnet_ds): expected at least two levels, got " + std::to_string(levels));
  auto encoder = register_module("encoder", std::make_shared<nn::Module>());
  conv_init_ = encoder->register_module("conv_init", conv3(o.in_channels(), o.init_filters()));
  auto enc_layers = encoder->register_module("layers", nn::ModuleList());
  int64_t f = o.init_filters();
  for (int64_t i = 0; i < levels; ++i, f *= 2) {
    auto level = std::make_shared<nn::Module>();
    auto seq = level->register_module("blocks", nn::ModuleList());
    enc_.emplace_back();
    for (int64_t b = 0; b < blocks[i]; ++b) {
      enc_[i].push_back(SegResBlock(f, o.norm_name()));
      seq->push_back(enc_[i].back());
    }
    if (i + 1 < levels) down_.push_back(level->register_module("downsample", conv3(f, 2 * f, 2)));
    enc_layers->push_back(level);
  }
  auto up_layers = register_module("up_layers", nn::ModuleList());
  f = o.init_filters() << (levels - 1);
  for (int64_t i = 0; i + 1 < levels; ++i) {
    f /= 2;
    auto level = std::make_shared<nn::Module>();
    // MONAI's UpSample "deconv" with kernel 3: padding 1, output padding 1.
    up_.push_back(
        level->register_module("upsample", std::make_shared<nn::Module>())
            ->register_module(
                "deconv",
                nn::ConvTranspose3d(
                    nn::ConvTranspose3dOptions(2 * f, f, 3).stride(2).padding(1).output_padding(1).bias(false))));
    auto seq = level->register_module("blocks", nn::ModuleList());
    dec_.emplace_back();
    dec_[i].push_back(SegResBlock(f, o.norm_name()));  // MONAI's blocks_up: one per level
    seq->push_back(dec_[i].back());
    const bool head = levels - 1 - i <= o.heads();
    heads_.push_back(
        head ? level->register_module("head", nn::Conv3d(nn::Conv3dOptions(f, o.num_classes(), 1).bias(true)))
             : nn::Conv3d{nullptr});
    up_layers->push_back(level);
  }
  if (o.channels_last()) to_channels_last(*this);
}

void SegResNetDSImpl::check_input(const std::vector<int64_t>& shape) const {
  check_channels("segresnet_ds", shape, 3, options_.in_channels());
  const auto levels = static_cast<int64_t>(options_.blocks_down().size());
  check_divisible("segresnet_ds", shape, int64_t{1} << (levels - 1),
                  "2^" + std::to_string(levels - 1) + " for its " + std::to_string(levels) + " levels");
}

std::vector<torch::Tensor> SegResNetDSImpl::forward(const torch::Tensor& input) {
  check_input(input.sizes().vec());
  const bool train = is_training();
  const bool main = checkpoints(options_.checkpoint(), true);
  const auto run = [&](const std::vector<SegResBlock>& blocks, const torch::Tensor& in) {
    return run_blocks(blocks, in, main, train);
  };
  torch::Tensor x = input.contiguous(conv_memory_format(3, options_.channels_last()));
  {
    const core::BlockScope block("stem", -1);
    x = conv_init_(x);
  }
  const size_t levels = enc_.size();
  std::vector<torch::Tensor> skips;
  for (size_t i = 0; i < levels; ++i) {
    const core::BlockScope block("encoder", static_cast<int>(i));  // with its downsampling
    x = run(enc_[i], x);
    if (i + 1 < levels) {
      skips.push_back(x);
      x = down_[i](x);
    }
  }
  std::vector<torch::Tensor> outputs;
  for (size_t i = 0; i + 1 < levels; ++i) {
    const core::BlockScope block("decoder", static_cast<int>(i));  // with its head
    x = up_[i](x).add_(skips[levels - 2 - i]);
    x = run(dec_[i], x);
    if (heads_[i] && (train || i + 2 == levels)) outputs.push_back(heads_[i](x));
  }
  std::reverse(outputs.begin(), outputs.end());  // highest resolution first
  if (!train) outputs.resize(1);
  return outputs;
}

std::vector<std::vector<int64_t>> SegResNetDSImpl::output_shapes(const std::vector<int64_t>& in) {
  check_input(in);
  std::vector<std::vector<int64_t>> shapes;
  // As MONAI: a dsdepth beyond the decoder's levels gives every level a head.
  const auto levels = static_cast<int64_t>(options_.blocks_down().size());
  const int64_t count = is_training() ? std::min(options_.heads(), levels - 1) : 1;
  for (int64_t level = 0; level < count; ++level)
    shapes.push_back({in[0], options_.num_classes(), in[2] >> level, in[3] >> level, in[4] >> level});
  return shapes;
}

// What the training forward keeps, by memory_estimate.h's rules. A block: each affine norm keeps its
// input (the fused kernel too, as ATen) and its statistics, and its ReLU's output (in place) is what
// the next conv keeps; the conv2 + input sum (in place) is the block's output, kept by what follows.
// Batch norm keeps its input and one mean and invstd per channel for the whole batch. The strided
// and transposed convs keep their inputs (counted where made); each level's output (the
// transposed conv's output plus the skip, in place) is kept by its first norm. Checkpointed levels
// keep only their output.
std::optional<ActivationEstimate> SegResNetDSImpl::saved_activations(const std::vector<int64_t>& shape,
                                                                     c10::ScalarType c, const KernelPaths& paths,
                                                                     std::optional<CheckpointMode> recompute) const {
  using namespace rules;
  const bool main = checkpoints(recompute.value_or(options_.checkpoint()), true);
  const auto& o = options_;
  const auto levels = static_cast<int64_t>(o.blocks_down().size());
  const int64_t v_in = shape[2] * shape[3] * shape[4], classes = o.num_classes();
  const auto voxels = [&](int64_t level) { return v_in >> (3 * level); };
  const auto ch = [&](int64_t level) { return o.init_filters() << level; };
  const bool batch_norm = o.norm_name() == "batch";
  Tally t(c, shape[0], paths);
  const auto norm_relu = [&](int64_t f, int64_t v) {
    if (batch_norm)
      t.keep_unbatched(2 * f, c10::kFloat);
    else
      t.instance_norm(f, true);
    t.keep(f * v, c);  // the ReLU's output, which the conv keeps
  };
  const auto level = [&](int64_t blocks, int64_t f, int64_t v) {
    if (main && blocks > 0) {
      t.keep(f * v, c);
      return;
    }
    for (int64_t b = 0; b < blocks; ++b) {
      norm_relu(f, v);
      t.matmul_layer(f * f * 27, f * v, c);
      t.keep(f * v, c);  // conv1's output, the second norm's input
      norm_relu(f, v);
      t.matmul_layer(f * f * 27, f * v, c);
      t.keep(f * v, c);  // the block's output
    }
  };
  t.block("stem");
  t.matmul_layer(o.in_channels() * ch(0) * 27, o.in_channels() * v_in, c10::kFloat);
  t.keep(ch(0) * v_in, c);
  for (int64_t i = 0; i < levels; ++i) {
    t.block("encoder" + std::to_string(i));
    level(o.blocks_down()[i], ch(i), voxels(i));
    if (i + 1 < levels) {
      t.matmul_layer(ch(i) * ch(i + 1) * 27, ch(i) * voxels(i), c);
      t.keep(ch(i + 1) * voxels(i + 1), c);
    }
  }
  for (int64_t i = 0; i + 1 < levels; ++i) {
    const int64_t l = levels - 2 - i;
    t.block("decoder" + std::to_string(i));
    t.matmul_layer(ch(l + 1) * ch(l) * 27, ch(l + 1) * voxels(l + 1), c);
    t.keep(ch(l) * voxels(l), c);  // the transposed conv's output plus the skip
    level(1, ch(l), voxels(l));
    if (l < o.heads()) {
      t.matmul_layer(ch(l) * classes + classes, ch(l) * voxels(l), c);
      t.output(classes * voxels(l), c);
    }
  }
  return t.finish();
}

namespace {

// voxfit's names are MONAI's; MONAI's SegResNetDS with these settings.
ReferenceImplementation monai_reference() {
  return {"monai", [](const std::string& name) { return name; },
          [](const ModelContext& ctx, const std::map<std::string, std::string>& p) -> nlohmann::json {
            const bool ds = monai::is_true(p.at("deep_supervision"));
            nlohmann::json kwargs = {{"spatial_dims", 3},
                                     {"init_filters", std::stoll(p.at("init_filters"))},
                                     {"in_channels", ctx.in_channels},
                                     {"out_channels", ctx.num_classes},
                                     {"norm", p.at("norm_name") == "batch" ? "BATCH" : "INSTANCE"},
                                     {"blocks_down", monai::integers(p.at("blocks_down"))},
                                     {"dsdepth", ds ? std::stoll(p.at("dsdepth")) : 1}};
            return {{"class", "monai.networks.nets.SegResNetDS"}, {"kwargs", kwargs}};
          },
          nullptr};
}

}  // namespace

// This network's registry entry: CMake lists S_entry() of every src/models/nets/S.cpp for registry();
// the helpers are in registry_support.h.
ModelEntry segresnet_ds_entry() {
  ModelEntry e = detail::entry_for<SegResNetDSOptions>(
      "segresnet_ds", "MONAI 1.5 SegResNetDS as Auto3DSeg configures it (init 32, blocks 1,2,2,4,4, dsdepth 4)",
      TaskKind::kSegmentation3d, ModelContext{}, 87170008,
      [](SegResNetDSOptions o, const ModelContext& ctx) -> Network {
        return std::make_shared<SegResNetDSImpl>(o.in_channels(ctx.in_channels)
                                                     .num_classes(ctx.num_classes)
                                                     .checkpoint(ctx.checkpoint)
                                                     .channels_last(ctx.channels_last));
      });
  e.listing_order = 40;
  e.reference = monai_reference();
  // SegResNetDS(init_filters=32, blocks_down=(1,2,2,4,4)) with MONAI's own defaults (dsdepth 1).
  e.reference_counts = {{"segresnet_ds_dsdepth1", {{"deep_supervision", "false"}}, 87163694}};
  return e;
}

}  // namespace voxfit::models
