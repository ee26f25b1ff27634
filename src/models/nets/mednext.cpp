#include "voxfit/models/nets/mednext.h"

#include <torch/torch.h>

#include <algorithm>

#include "voxfit/core/block_scope.h"
#include "voxfit/core/error.h"
#include "voxfit/kernels/instance_norm_act.h"
#include "voxfit/models/blocks/layers.h"
#include "voxfit/models/checkpoint.h"
#include "voxfit/models/shape_checks.h"

#include "../activation_rules.h"
#include "../monai_naming.h"
#include "../registry_support.h"

namespace voxfit::models {

namespace nn = torch::nn;

namespace {
constexpr int64_t kLevels = 4;

}  // namespace

MedNeXtBlockImpl::MedNeXtBlockImpl(int64_t in, int64_t out, int64_t expansion, int64_t kernel, int stride)
    : stride_(stride), padding_(kernel / 2) {
  if (stride == -2)
    up_conv1_ = register_module(
        "conv1",
        nn::ConvTranspose3d(nn::ConvTranspose3dOptions(in, in, kernel).stride(2).padding(padding_).groups(in)));
  else
    conv1_ = register_module("conv1",
                             nn::Conv3d(nn::Conv3dOptions(in, in, kernel).stride(stride).padding(padding_).groups(in)));
  norm_ = register_module("norm", nn::GroupNorm(nn::GroupNormOptions(in, in)));
  conv2_ = register_module("conv2", nn::Conv3d(nn::Conv3dOptions(in, expansion * in, 1)));
  conv3_ = register_module("conv3", nn::Conv3d(nn::Conv3dOptions(expansion * in, out, 1)));
  if (stride == 2)
    res_conv_ = register_module("res_conv", nn::Conv3d(nn::Conv3dOptions(in, out, 1).stride(2)));
  else if (stride == -2)
    up_res_conv_ = register_module("res_conv", nn::ConvTranspose3d(nn::ConvTranspose3dOptions(in, out, 1).stride(2)));
  else if (in != out)
    throw ModelError("mednext: a plain block keeps its width (" + std::to_string(in) + " -> " + std::to_string(out) +
                     ")");
}

torch::Tensor MedNeXtBlockImpl::forward(const torch::Tensor& x) {
  auto y = stride_ == -2 ? up_conv1_(x) : conv1_(x);
  // GroupNorm with a group per channel is an affine instance norm: on the fused path it runs as
  // kernels::instance_norm_act in the input's dtype, where autocast runs ATen's group_norm in
  // float32 between two casts.
  if (kernels::fused_instance_norm_applies(y, norm_->weight, {})) {
    kernels::NormActSpec spec;
    spec.eps = norm_->options.eps();
    y = kernels::instance_norm_act(y, norm_->weight, norm_->bias, {}, spec);
  } else {
    y = norm_(y);
  }
  y = apply_pointwise(conv3_, torch::gelu(apply_pointwise(conv2_, y)));
  if (stride_ == 1) return x + y;
  if (stride_ == 2) return y + res_conv_(x);
  // Up: each path is 2n - 1 long; one zero in front of every axis makes it 2n (MONAI's F.pad).
  const std::vector<int64_t> front{1, 0, 1, 0, 1, 0};
  return torch::constant_pad_nd(y, front) + torch::constant_pad_nd(up_res_conv_(x), front);
}

MedNeXtImpl::MedNeXtImpl(const MedNeXtOptions& o) : options_(o) {
  const auto per_level = [](const std::vector<int64_t>& v, const char* name) {
    if (v.size() != kLevels)
      throw ConfigError(std::string("--") + name + " (mednext): expected 4 values, one per level, got " +
                        std::to_string(v.size()));
  };
  per_level(o.encoder_expansion(), "encoder-expansion");
  per_level(o.decoder_expansion(), "decoder-expansion");
  per_level(o.blocks_down(), "blocks-down");
  per_level(o.blocks_up(), "blocks-up");
  if (o.kernel_size() % 2 == 0)
    throw ModelError("mednext: kernel_size must be odd, got " + std::to_string(o.kernel_size()));
  const int64_t k = o.kernel_size();
  std::vector<int64_t> c;
  for (int64_t i = 0; i <= kLevels; ++i) c.push_back(o.init_filters() << i);
  stem_ = register_module("stem", nn::Conv3d(nn::Conv3dOptions(o.in_channels(), c[0], 1)));
  auto enc = register_module("enc_stages", nn::ModuleList());
  auto down = register_module("down_blocks", nn::ModuleList());
  for (int64_t i = 0; i < kLevels; ++i) {
    auto level = nn::ModuleList();
    enc_.emplace_back();
    for (int64_t b = 0; b < o.blocks_down()[i]; ++b) {
      enc_[i].push_back(MedNeXtBlock(c[i], c[i], o.encoder_expansion()[i], k, 1));
      level->push_back(enc_[i].back());
    }
    enc->push_back(level);
    down_.push_back(MedNeXtBlock(c[i], c[i + 1], o.encoder_expansion()[i], k, 2));
    down->push_back(down_.back());
  }
  auto bottleneck = register_module("bottleneck", nn::ModuleList());
  for (int64_t b = 0; b < o.blocks_bottleneck(); ++b) {
    bottleneck_.push_back(MedNeXtBlock(c[kLevels], c[kLevels], o.bottleneck_expansion(), k, 1));
    bottleneck->push_back(bottleneck_.back());
  }
  auto up = register_module("up_blocks", nn::ModuleList());
  auto dec = register_module("dec_stages", nn::ModuleList());
  for (int64_t i = 0; i < kLevels; ++i) {
    const int64_t in = c[kLevels - i], out = c[kLevels - 1 - i];
    up_.push_back(MedNeXtBlock(in, out, o.decoder_expansion()[i], k, -2));
    up->push_back(up_.back());
    auto level = nn::ModuleList();
    dec_.emplace_back();
    for (int64_t b = 0; b < o.blocks_up()[i]; ++b) {
      dec_[i].push_back(MedNeXtBlock(out, out, o.decoder_expansion()[i], k, 1));
      level->push_back(dec_[i].back());
    }
    dec->push_back(level);
  }
  // MONAI's MedNeXtOutBlock: a 1x1x1 transposed convolution held as "conv_out".
  out_ = register_module("out_0", std::make_shared<nn::Module>())
             ->register_module("conv_out", nn::ConvTranspose3d(nn::ConvTranspose3dOptions(c[0], o.num_classes(), 1)));
  if (o.deep_supervision()) {  // out_blocks.j.conv_out, the bottleneck's first
    auto heads = register_module("out_blocks", nn::ModuleList());
    for (int64_t j = 0; j < kLevels; ++j) {
      auto block = std::make_shared<nn::Module>();
      ds_heads_.push_back(block->register_module(
          "conv_out", nn::ConvTranspose3d(nn::ConvTranspose3dOptions(c[kLevels - j], o.num_classes(), 1))));
      heads->push_back(block);
    }
  }
  if (o.channels_last()) to_channels_last(*this);
}

void MedNeXtImpl::check_input(const std::vector<int64_t>& shape) const {
  check_channels("mednext", shape, 3, options_.in_channels());
  check_divisible("mednext", shape, int64_t{1} << kLevels, "2^4 for its four levels");
}

std::vector<torch::Tensor> MedNeXtImpl::forward(const torch::Tensor& input) {
  check_input(input.sizes().vec());
  const bool train = is_training();
  const bool main = checkpoints(options_.checkpoint(), true);
  const auto run = [&](const std::vector<MedNeXtBlock>& blocks, const torch::Tensor& in) {
    return run_blocks(blocks, in, main, train);
  };
  torch::Tensor x = input.contiguous(conv_memory_format(3, options_.channels_last()));
  {
    const core::BlockScope block("stem", -1);
    x = stem_(x);
  }
  std::vector<torch::Tensor> skips;
  for (int64_t i = 0; i < kLevels; ++i) {
    const core::BlockScope block("encoder", static_cast<int>(i));  // with its down block
    x = run(enc_[i], x);
    skips.push_back(x);
    x = down_[i]->forward(x);
  }
  {
    const core::BlockScope block("bottleneck", -1);
    x = run(bottleneck_, x);
  }
  const bool heads = train && options_.deep_supervision();
  std::vector<torch::Tensor> ds;
  for (int64_t i = 0; i < kLevels; ++i) {
    const core::BlockScope block("decoder", static_cast<int>(i));  // with the head before its up block
    if (heads) ds.push_back(ds_heads_[i]->forward(x));
    x = up_[i]->forward(x) + skips[kLevels - 1 - i];
    x = run(dec_[i], x);
  }
  const core::BlockScope block("out", -1);
  std::vector<torch::Tensor> outputs{out_->forward(x)};
  outputs.insert(outputs.end(), ds.rbegin(), ds.rend());  // highest resolution first
  return outputs;
}

std::vector<std::vector<int64_t>> MedNeXtImpl::output_shapes(const std::vector<int64_t>& in) {
  check_input(in);
  std::vector<std::vector<int64_t>> shapes{{in[0], options_.num_classes(), in[2], in[3], in[4]}};
  if (is_training() && options_.deep_supervision())
    for (int64_t level = 1; level <= kLevels; ++level)
      shapes.push_back({in[0], options_.num_classes(), in[2] >> level, in[3] >> level, in[4] >> level});
  return shapes;
}

// What the training forward keeps, by memory_estimate.h's rules. A block: the depthwise conv keeps
// its input (the previous block's output, counted where it was made); GroupNorm keeps the conv's
// output (under autocast its float32 cast: autocast runs group_norm in float32) and a mean and rstd
// per channel, the fused instance norm that replaces it on CUDA the output as it is and the rule's
// statistics; the 1x1 expansion keeps the norm's output (under autocast its cast back); GELU keeps
// its input and the 1x1 compression GELU's output; the block's output (the residual add's) stays
// for the next block. A down block's strided 1x1 residual conv reads the input already kept; an up
// block's paths are (2n-1)^3 before the zero pad. Checkpointed levels keep only their output.
std::optional<ActivationEstimate> MedNeXtImpl::saved_activations(const std::vector<int64_t>& shape, c10::ScalarType c,
                                                                 const KernelPaths& paths,
                                                                 std::optional<CheckpointMode> recompute) const {
  using namespace rules;
  const bool main = checkpoints(recompute.value_or(options_.checkpoint()), true);
  const auto& o = options_;
  const int64_t k3 = o.kernel_size() * o.kernel_size() * o.kernel_size(), classes = o.num_classes();
  const int64_t v_in = shape[2] * shape[3] * shape[4];
  const auto voxels = [&](int64_t level) { return v_in >> (3 * level); };
  const auto up_voxels = [&](int64_t level) {  // a transposed conv's output at `level`, before the pad
    return ((shape[2] >> level) - 1) * ((shape[3] >> level) - 1) * ((shape[4] >> level) - 1);
  };
  Tally t(c, shape[0], paths);
  // One block's body from the depthwise conv's output on: `ch` channels at `v` voxels, expanded
  // `e` times, compressed to `out`; its output (after the residual) stays.
  const auto body = [&](int64_t ch, int64_t v, int64_t e, int64_t out) {
    if (paths.fused_kernels) {  // kernels::instance_norm_act: keeps its input, in the compute dtype
      t.keep(ch * v, c);
      t.instance_norm(ch, true);
      t.matmul_layer(ch * e * ch + e * ch, ch * v, c);
      t.keep(ch * v, c);  // the norm's output, read by the expansion
    } else {
      t.keep(ch * v, t.autocast() ? c10::kFloat : c);  // GroupNorm's input
      t.keep(2 * ch, c10::kFloat);                     // its mean and rstd
      t.matmul_layer(ch * e * ch + e * ch, ch * v, c10::kFloat);
      if (!t.autocast()) t.keep(ch * v, c);  // the norm's output, read by the expansion
    }
    t.keep(e * ch * v, c);  // GELU's input
    t.keep(e * ch * v, c);  // and its output
    t.matmul_layer(e * ch * out + out, e * ch * v, c);
  };
  const auto block = [&](int64_t ch, int64_t v, int64_t e) {
    t.matmul_layer(ch * k3 + ch, ch * v, c);
    body(ch, v, e, ch);
    t.keep(ch * v, c);
  };
  const auto level = [&](int64_t blocks, int64_t ch, int64_t v, int64_t e) {
    if (main && blocks > 0) {
      t.keep(ch * v, c);
      return;
    }
    for (int64_t b = 0; b < blocks; ++b) block(ch, v, e);
  };
  const auto ch = [&](int64_t level) { return o.init_filters() << level; };
  t.block("stem");
  t.matmul_layer(o.in_channels() * ch(0) + ch(0), o.in_channels() * v_in, c10::kFloat);
  t.keep(ch(0) * v_in, c);
  for (int64_t i = 0; i < kLevels; ++i) {
    t.block("encoder" + std::to_string(i));
    level(o.blocks_down()[i], ch(i), voxels(i), o.encoder_expansion()[i]);
    t.matmul_layer(ch(i) * k3 + ch(i), ch(i) * voxels(i), c);  // the strided depthwise conv
    body(ch(i), voxels(i + 1), o.encoder_expansion()[i], ch(i + 1));
    t.matmul_layer(ch(i) * ch(i + 1) + ch(i + 1), ch(i) * voxels(i), c);  // the strided residual conv
    t.keep(ch(i + 1) * voxels(i + 1), c);
  }
  t.block("bottleneck");
  level(o.blocks_bottleneck(), ch(kLevels), voxels(kLevels), o.bottleneck_expansion());
  const bool heads = o.deep_supervision();
  for (int64_t i = 0; i < kLevels; ++i) {
    const int64_t in = ch(kLevels - i), out = ch(kLevels - 1 - i), e = o.decoder_expansion()[i];
    const int64_t v = voxels(kLevels - 1 - i);
    t.block("decoder" + std::to_string(i));
    if (heads) {
      t.matmul_layer(in * classes + classes, in * voxels(kLevels - i), c);
      t.output(classes * voxels(kLevels - i), c);
    }
    t.matmul_layer(in * k3 + in, in * voxels(kLevels - i), c);  // the transposed depthwise conv
    body(in, up_voxels(kLevels - 1 - i), e, out);
    t.matmul_layer(in * out + out, in * voxels(kLevels - i), c);  // the transposed residual conv
    t.keep(out * v, c);                                           // the skip's sum, the first block's input
    level(o.blocks_up()[i], out, v, e);
  }
  t.block("out");
  t.matmul_layer(ch(0) * classes + classes, ch(0) * v_in, c);
  t.output(classes * v_in, c);
  return t.finish();
}

namespace {

Network make_mednext(MedNeXtOptions o, const ModelContext& ctx) {
  return std::make_shared<MedNeXtImpl>(o.in_channels(ctx.in_channels)
                                           .num_classes(ctx.num_classes)
                                           .checkpoint(ctx.checkpoint)
                                           .channels_last(ctx.channels_last));
}

// voxfit's names are MONAI's; MONAI's MedNeXt class with these settings (create_mednext's).
ReferenceImplementation monai_reference() {
  return {"monai", [](const std::string& name) { return name; },
          [](const ModelContext& ctx, const std::map<std::string, std::string>& p) -> nlohmann::json {
            nlohmann::json kwargs = {{"spatial_dims", 3},
                                     {"init_filters", std::stoll(p.at("init_filters"))},
                                     {"in_channels", ctx.in_channels},
                                     {"out_channels", ctx.num_classes},
                                     {"encoder_expansion_ratio", monai::integers(p.at("encoder_expansion"))},
                                     {"decoder_expansion_ratio", monai::integers(p.at("decoder_expansion"))},
                                     {"bottleneck_expansion_ratio", std::stoll(p.at("bottleneck_expansion"))},
                                     {"kernel_size", std::stoll(p.at("kernel_size"))},
                                     {"deep_supervision", monai::is_true(p.at("deep_supervision"))},
                                     {"use_residual_connection", true},
                                     {"blocks_down", monai::integers(p.at("blocks_down"))},
                                     {"blocks_bottleneck", std::stoll(p.at("blocks_bottleneck"))},
                                     {"blocks_up", monai::integers(p.at("blocks_up"))},
                                     {"norm_type", "group"},
                                     {"global_resp_norm", false}};
            return {{"class", "monai.networks.nets.MedNeXt"}, {"kwargs", kwargs}};
          },
          nullptr};
}

ModelEntry variant(const std::string& size, int64_t parameters, const std::map<std::string, std::string>& settings,
                   int order) {
  ModelEntry e =
      detail::entry_for<MedNeXtOptions>("mednext_" + size,
                                        "MedNeXt-" + std::string(1, static_cast<char>(std::toupper(size[0]))) +
                                            " (MONAI 1.5 create_mednext, kernel 3; --kernel-size 5 too)",
                                        TaskKind::kSegmentation3d, ModelContext{}, parameters, make_mednext, settings);
  e.listing_order = order;
  e.reference = monai_reference();
  return e;
}

}  // namespace

// This network's registry entry (MedNeXt-S) and its variants B, M and L: CMake lists S_entry() of
// every src/models/nets/S.cpp for registry(); the helpers are in registry_support.h.
ModelEntry mednext_entry() {
  ModelEntry s = variant("s", 5551310, {}, 36);
  s.reference_counts = {{"mednext_s_k5", {{"kernel_size", "5"}}, 5980942},
                        {"mednext_s_ds", {{"deep_supervision", "true"}}, 5564806}};
  s.variants = {
      variant("b", 10511246,
              {{"encoder_expansion", "2,3,4,4"}, {"decoder_expansion", "4,4,3,2"}, {"bottleneck_expansion", "4"}}, 37),
      variant("m", 17533902,
              {{"encoder_expansion", "2,3,4,4"},
               {"decoder_expansion", "4,4,3,2"},
               {"bottleneck_expansion", "4"},
               {"blocks_down", "3,4,4,4"},
               {"blocks_bottleneck", "4"},
               {"blocks_up", "4,4,4,3"}},
              38),
      variant("l", 61727150,
              {{"encoder_expansion", "3,4,8,8"},
               {"decoder_expansion", "8,8,4,3"},
               {"bottleneck_expansion", "8"},
               {"blocks_down", "3,4,8,8"},
               {"blocks_bottleneck", "8"},
               {"blocks_up", "8,8,4,3"}},
              39)};
  return s;
}

}  // namespace voxfit::models
