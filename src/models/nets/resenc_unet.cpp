#include "voxfit/models/nets/resenc_unet.h"

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "voxfit/core/block_scope.h"
#include "voxfit/core/error.h"
#include "voxfit/models/blocks/layers.h"
#include "voxfit/models/checkpoint.h"
#include "voxfit/models/shape_checks.h"

#include "../activation_rules.h"
#include "../registry_support.h"

namespace voxfit::models {

namespace nn = torch::nn;

namespace {

std::vector<int64_t> vec(const Axes3& a) { return {a[0], a[1], a[2]}; }

std::string axes_text(const Axes3& a) {
  return std::to_string(a[0]) + "x" + std::to_string(a[1]) + "x" + std::to_string(a[2]);
}

// A container module whose children are named by the caller (nnU-Net's Sequential / ModuleList
// levels: "stem", "convs", "blocks", "skip", ...).
std::shared_ptr<nn::Module> holder() { return std::make_shared<nn::Module>(); }

}  // namespace

ResEncTopology resenc_topology(const std::vector<int64_t>& patch, const std::vector<double>& spacing) {
  if (patch.size() != 3) throw ModelError("resenc_unet: patch " + shape_to_string(patch) + " needs 3 sizes");
  if (spacing.size() != 3) throw ConfigError("--spacing (resenc_unet): expected 3 values D,H,W");
  constexpr int64_t kMinFeatureMap = 4;  // nnU-Net's UNet_featuremap_min_edge_length
  ResEncTopology t;
  std::array<double, 3> sp{spacing[0], spacing[1], spacing[2]};
  Axes3 size{patch[0], patch[1], patch[2]}, pools{0, 0, 0}, kernel{1, 1, 1};
  t.strides.push_back({1, 1, 1});
  for (;;) {
    std::vector<int> valid;
    for (int i = 0; i < 3; ++i)
      if (size[i] >= 2 * kMinFeatureMap) valid.push_back(i);
    if (valid.empty()) break;
    double finest = sp[valid[0]];
    for (const int i : valid) finest = std::min(finest, sp[i]);
    valid.erase(std::remove_if(valid.begin(), valid.end(), [&](int i) { return !(sp[i] / finest < 2); }), valid.end());
    if (valid.size() == 1 && !(size[valid[0]] >= 3 * kMinFeatureMap)) break;
    if (valid.empty()) break;
    const double finest_all = *std::min_element(sp.begin(), sp.end());
    for (int d = 0; d < 3; ++d)
      if (kernel[d] != 3 && sp[d] / finest_all < 2) kernel[d] = 3;
    Axes3 stride{1, 1, 1};
    for (const int v : valid) {
      stride[v] = 2;
      ++pools[v];
      sp[v] *= 2;
      size[v] = (size[v] + 1) / 2;
    }
    t.strides.push_back(stride);
    t.kernels.push_back(kernel);
  }
  t.kernels.push_back({3, 3, 3});  // the bottleneck's
  for (int i = 0; i < 3; ++i) {
    t.divisor[i] = int64_t{1} << pools[i];
    t.patch[i] = (patch[i] + t.divisor[i] - 1) / t.divisor[i] * t.divisor[i];
  }
  return t;
}

ResEncConvImpl::ResEncConvImpl(int64_t in, int64_t out, const Axes3& kernel, const Axes3& stride, bool bias, bool act)
    : act_(act), stride_(stride) {
  for (int i = 0; i < 3; ++i) padding_[i] = (kernel[i] - 1) / 2;
  conv_ = register_module(
      "conv",
      nn::Conv3d(nn::Conv3dOptions(in, out, vec(kernel)).stride(vec(stride)).padding(vec(padding_)).bias(bias)));
  norm_ = make_norm("instance_affine", 3, out);
  register_module("norm", norm_.ptr());
}

torch::Tensor ResEncConvImpl::forward(const torch::Tensor& x, const torch::Tensor& residual) {
  // An instance norm cancels a per-channel bias; the fused path leaves it out (norm_cancels_conv_bias).
  const bool bias = conv_->bias.defined() && !norm_cancels_conv_bias(norm_);
  const auto y = torch::conv3d(x, conv_->weight, bias ? conv_->bias : torch::Tensor(), vec(stride_), vec(padding_));
  return apply_norm_act(norm_, act_ ? "leakyrelu" : "none", y, residual);
}

ResEncBlockImpl::ResEncBlockImpl(int64_t in, int64_t out, const Axes3& kernel, const Axes3& stride) : stride_(stride) {
  conv1_ = register_module("conv1", ResEncConv(in, out, kernel, stride, true, true));
  conv2_ =
      register_module("conv2", ResEncConv(out, out, kernel, Axes3{1, 1, 1}, true, true));  // LeakyReLU after the add
  pool_ = stride != Axes3{1, 1, 1};
  if (in != out) {
    // nnU-Net's skip: Sequential(AvgPool3d, ConvDropoutNormReLU(1x1x1, no bias, no activation)); the
    // projection is its child "1" after a pool, "0" without.
    auto skip = register_module("skip", holder());
    projection_ =
        skip->register_module(pool_ ? "1" : "0", ResEncConv(in, out, Axes3{1, 1, 1}, Axes3{1, 1, 1}, false, false));
  }
}

torch::Tensor ResEncBlockImpl::forward(const torch::Tensor& x) {
  auto residual = pool_ ? torch::avg_pool3d(x, vec(stride_), vec(stride_)) : x;
  if (projection_) residual = projection_(residual);
  return conv2_(conv1_(x), residual);
}

void ResEncBlockImpl::zero_last_norm() {
  torch::NoGradGuard no_grad;
  for (auto& p : conv2_->named_parameters())
    if (p.key().rfind("norm.", 0) == 0) p.value().zero_();
}

ResEncTopology resenc_plan(const ResEncUNetOptions& o) {
  ResEncTopology t = resenc_topology(o.img_size(), o.spacing());
  if (t.stages() < 2)
    throw ModelError("resenc_unet: patch " + shape_to_string(o.img_size()) +
                     " is too small for one pooling (an axis needs 8 voxels or more)");
  if (o.max_features() < o.base_features())
    throw ModelError("resenc_unet: need base_features <= max_features, got " + std::to_string(o.base_features()) +
                     " and " + std::to_string(o.max_features()));
  const auto& counts = o.blocks_per_stage();
  for (size_t s = 0; s < t.stages(); ++s) {
    t.features.push_back(std::min(o.base_features() << std::min<size_t>(s, 20), o.max_features()));
    t.blocks.push_back(counts[std::min(s, counts.size() - 1)]);
  }
  return t;
}

int64_t nnunet_feature_map_size(const ResEncTopology& t, int64_t decoder_convs, int64_t classes,
                                bool deep_supervision) {
  const size_t n = t.stages();
  const auto& f = t.features;
  // The input size of each stage and, after its stride, its output size (nnU-Net's floor division).
  std::vector<int64_t> voxels;
  Axes3 size = t.patch;
  for (size_t s = 0; s < n; ++s) {
    for (int i = 0; i < 3; ++i) size[i] /= t.strides[s][i];
    voxels.push_back(size[0] * size[1] * size[2]);
  }
  int64_t total = f[0] * voxels[0];  // the stem
  for (size_t s = 0; s < n; ++s) {
    const int64_t in = s == 0 ? f[0] : f[s - 1];
    const bool projects = in != f[s] || t.strides[s] != Axes3{1, 1, 1};
    total += (2 * t.blocks[s] + (projects ? 1 : 0)) * f[s] * voxels[s];  // conv1 and conv2 per block, the skip
  }
  for (size_t d = 0; d + 1 < n; ++d) {
    const size_t level = n - 2 - d;
    total += (decoder_convs + 1) * f[level] * voxels[level];  // the stage's convs and the transposed conv
    if (deep_supervision || d + 2 == n) total += classes * voxels[level];
  }
  return total;
}

ResEncUNetImpl::ResEncUNetImpl(const ResEncUNetOptions& o) : options_(o), topology_(resenc_plan(o)) {
  const size_t n = topology_.stages();
  const auto& f = topology_.features;
  const auto& k = topology_.kernels;
  const auto& st = topology_.strides;

  auto encoder = register_module("encoder", holder());
  auto stem = encoder->register_module("stem", holder());
  auto stem_convs = stem->register_module("convs", nn::ModuleList());
  stem_ = ResEncConv(o.in_channels(), f[0], k[0], Axes3{1, 1, 1}, true, true);
  stem_convs->push_back(stem_);
  auto stage_list = encoder->register_module("stages", nn::ModuleList());
  for (size_t s = 0; s < n; ++s) {
    auto stage = holder();
    auto blocks = stage->register_module("blocks", nn::ModuleList());
    stages_.emplace_back();
    for (int64_t b = 0; b < topology_.blocks[s]; ++b) {
      const int64_t in = b > 0 ? f[s] : s == 0 ? f[0] : f[s - 1];
      stages_[s].push_back(ResEncBlock(in, f[s], k[s], b == 0 ? st[s] : Axes3{1, 1, 1}));
      blocks->push_back(stages_[s].back());
    }
    stage_list->push_back(stage);
  }

  auto decoder = register_module("decoder", holder());
  auto dstages = decoder->register_module("stages", nn::ModuleList());
  auto transpconvs = decoder->register_module("transpconvs", nn::ModuleList());
  auto seg_layers = decoder->register_module("seg_layers", nn::ModuleList());
  for (size_t d = 0; d + 1 < n; ++d) {
    const int64_t below = f[n - 1 - d], skip = f[n - 2 - d];
    const Axes3& stride = st[n - 1 - d];
    upsample_.push_back(nn::ConvTranspose3d(nn::ConvTranspose3dOptions(below, skip, vec(stride)).stride(vec(stride))));
    transpconvs->push_back(upsample_.back());
    auto stage = holder();
    auto convs = stage->register_module("convs", nn::ModuleList());
    decoder_.emplace_back();
    for (int64_t c = 0; c < o.decoder_convs(); ++c) {
      decoder_[d].push_back(ResEncConv(c == 0 ? 2 * skip : skip, skip, k[n - 2 - d], Axes3{1, 1, 1}, true, true));
      convs->push_back(decoder_[d].back());
    }
    dstages->push_back(stage);
    heads_.push_back(nn::Conv3d(nn::Conv3dOptions(skip, o.num_classes(), 1).bias(true)));
    seg_layers->push_back(heads_.back());
  }

  // nnU-Net's initialize: InitWeights_He(1e-2), then the last norm of every residual block (before
  // the add) to zero.
  init_he_weights(*this);
  for (auto& stage : stages_)
    for (auto& block : stage) block->zero_last_norm();
  if (o.channels_last()) to_channels_last(*this);
}

void ResEncUNetImpl::check_input(const std::vector<int64_t>& shape) const {
  check_channels("resenc_unet", shape, 3, options_.in_channels());
  for (int i = 0; i < 3; ++i)
    if (shape[2 + i] % topology_.divisor[i] != 0)
      throw ModelError("resenc_unet: input " + shape_to_string(shape) + " is not divisible by " +
                       axes_text(topology_.divisor) + " (the poolings per axis of the patch " +
                       shape_to_string(options_.img_size()) + "; nnU-Net pads it to " + axes_text(topology_.patch) +
                       ")");
}

std::vector<torch::Tensor> ResEncUNetImpl::forward(const torch::Tensor& input) {
  check_input(input.sizes().vec());
  const bool train = is_training();
  const bool main = checkpoints(options_.checkpoint(), true), rest = checkpoints(options_.checkpoint(), false);
  torch::Tensor h = input.contiguous(conv_memory_format(3, options_.channels_last()));
  {
    const core::BlockScope block("stem", -1);
    auto stem = stem_;
    h = maybe_checkpoint(
        rest, train, [stem](const torch::Tensor& in) mutable { return stem->forward(in); }, h);
  }
  std::vector<torch::Tensor> skips;
  for (size_t s = 0; s < stages_.size(); ++s) {
    const core::BlockScope block("encoder", static_cast<int>(s));
    auto blocks = stages_[s];
    h = maybe_checkpoint(
        main, train,
        [blocks](const torch::Tensor& in) mutable {
          torch::Tensor y = in;
          for (auto& b : blocks) y = b->forward(y);
          return y;
        },
        h);
    skips.push_back(h);
  }
  const bool all_heads = train && options_.deep_supervision();
  const size_t n = decoder_.size();
  std::vector<torch::Tensor> outputs;
  for (size_t d = 0; d < n; ++d) {
    const core::BlockScope block("decoder", static_cast<int>(d));  // with its segmentation head
    auto up = upsample_[d];
    auto convs = decoder_[d];
    h = maybe_checkpoint(rest, train,
                         [up, convs](const std::vector<torch::Tensor>& in) mutable -> std::vector<torch::Tensor> {
                           torch::Tensor y = torch::cat({up->forward(in[0]), in[1]}, 1);  // upsampled first
                           for (auto& c : convs) y = c->forward(y);
                           return {y};
                         },
                         {h, skips[n - 1 - d]});
    if (all_heads || d + 1 == n) outputs.push_back(heads_[d]->forward(h));
  }
  std::reverse(outputs.begin(), outputs.end());
  return outputs;
}

std::vector<std::vector<int64_t>> ResEncUNetImpl::output_shapes(const std::vector<int64_t>& in) {
  check_input(in);
  // Decoder stage d ends at the resolution of encoder stage n-2-d.
  std::vector<std::vector<int64_t>> levels;
  std::vector<int64_t> size(in.begin() + 2, in.end());
  for (size_t s = 0; s < topology_.stages(); ++s) {
    for (int i = 0; i < 3; ++i) size[i] /= topology_.strides[s][i];
    levels.push_back({in[0], options_.num_classes(), size[0], size[1], size[2]});
  }
  const size_t n = topology_.stages() - 1;
  const size_t count = is_training() && options_.deep_supervision() ? n : 1;
  return std::vector<std::vector<int64_t>>(levels.begin(), levels.begin() + static_cast<std::ptrdiff_t>(count));
}

// What the training forward keeps, by memory_estimate.h's rules: every norm here is affine, so the
// fused kernels keep what ATen keeps (the conv output, the statistics, and the activated output for
// the next conv); a residual block's second norm goes into the add, whose activated output stays; a
// projection keeps the pooled input it reads; a decoder stage keeps the concatenation.
std::optional<ActivationEstimate> ResEncUNetImpl::saved_activations(const std::vector<int64_t>& shape,
                                                                    c10::ScalarType c, const KernelPaths& paths,
                                                                    std::optional<CheckpointMode> recompute) const {
  using namespace rules;
  const CheckpointMode mode = recompute.value_or(options_.checkpoint());
  const bool main = checkpoints(mode, true), rest = checkpoints(mode, false);
  const auto& k = topology_.kernels;
  const auto& st = topology_.strides;
  const size_t n = topology_.stages();
  const auto volume = [](const Axes3& a) { return a[0] * a[1] * a[2]; };
  std::vector<int64_t> v;  // voxels a sample at each stage
  Axes3 size{shape[2], shape[3], shape[4]};
  for (size_t s = 0; s < n; ++s) {
    for (int i = 0; i < 3; ++i) size[i] /= st[s][i];
    v.push_back(volume(size));
  }
  const int64_t v_in = shape[2] * shape[3] * shape[4], classes = options_.num_classes();
  const auto& f = topology_.features;
  Tally t(c, shape[0], paths);
  // conv (+ bias) + affine instance norm (+ activation).
  const auto cna = [&](int64_t in, int64_t out, int64_t in_voxels, int64_t voxels, ScalarType dt, int64_t kvol,
                       bool bias, NormOut norm_out) {
    conv_norm_act_weights(t, in * out * kvol + (bias ? out : 0), in, out, in_voxels, voxels, dt, true, norm_out);
  };
  t.block("stem");
  if (rest)
    t.keep(f[0] * v_in, c);
  else
    cna(options_.in_channels(), f[0], v_in, v_in, c10::kFloat, volume(k[0]), true, NormOut::kKept);
  for (size_t s = 0; s < n; ++s) {
    t.block("encoder" + std::to_string(s));
    if (main) {
      t.keep(f[s] * v[s], c);
      continue;
    }
    for (int64_t b = 0; b < topology_.blocks[s]; ++b) {
      const int64_t in = b > 0 ? f[s] : s == 0 ? f[0] : f[s - 1];
      const int64_t in_voxels = b > 0 || s == 0 ? v[s] : v[s - 1];
      cna(in, f[s], in_voxels, v[s], c, volume(k[s]), true, NormOut::kKept);  // conv1
      if (in != f[s]) {
        if (b == 0 && st[s] != Axes3{1, 1, 1}) t.keep(in * v[s], c);  // the pooled input the projection reads
        cna(in, f[s], v[s], v[s], c, 1, false, NormOut::kResidual);
      }
      cna(f[s], f[s], v[s], v[s], c, volume(k[s]), true, NormOut::kIntoAdd);  // conv2
      t.keep(f[s] * v[s], c);                                                 // the add's output, activated in place
    }
  }
  for (size_t d = 0; d + 1 < n; ++d) {
    const int64_t below = f[n - 1 - d], skip = f[n - 2 - d], vs = v[n - 2 - d];
    t.block("decoder" + std::to_string(d));
    if (rest) {
      t.keep(skip * vs, c);
    } else {
      // The transposed conv's output goes into the concatenation only; the concatenation stays.
      t.matmul_layer(below * skip * volume(st[n - 1 - d]) + skip, below * v[n - 1 - d], c);
      t.keep(2 * skip * vs, c);
      for (int64_t i = 0; i < options_.decoder_convs(); ++i)
        cna(i == 0 ? 2 * skip : skip, skip, vs, vs, c, volume(k[n - 2 - d]), true, NormOut::kKept);
    }
    if (options_.deep_supervision() || d + 2 == n) {
      t.matmul_layer(skip * classes + classes, skip * vs, c);
      t.output(classes * vs, c);
    }
  }
  return t.finish();
}

namespace {

// nnU-Net registers each ConvDropoutNormReLU's conv and norm a second time (all_modules.0 / .1) and
// the whole encoder again inside the decoder (decoder.encoder.*): its state dict holds every such
// tensor under each of those keys, and a strict load_state_dict asks for all of them.
std::vector<std::string> nnunet_aliases(const std::string& key) {
  std::vector<std::string> same{key};
  for (const auto& [part, alias] : {std::pair<std::string, std::string>{".conv.", ".all_modules.0."},
                                    std::pair<std::string, std::string>{".norm.", ".all_modules.1."}}) {
    const auto at = key.rfind(part);
    if (at != std::string::npos && key.find('.', at + part.size()) == std::string::npos)
      same.push_back(key.substr(0, at) + alias + key.substr(at + part.size()));
  }
  if (key.rfind("encoder.", 0) == 0)
    for (size_t i = 0, n = same.size(); i < n; ++i) same.push_back("decoder." + same[i]);
  return std::vector<std::string>(same.begin() + 1, same.end());
}

// dynamic_network_architectures' ResidualEncoderUNet with the arch_kwargs an nnU-Net plans file
// holds for this configuration (ops as the dotted names nnU-Net's plans give them).
nlohmann::json nnunet_constructor(const ModelContext& ctx, const std::map<std::string, std::string>& params) {
  ModelContext with = ctx;
  with.params = params;
  const auto o =
      detail::read_params<ResEncUNetOptions>("resenc_unet", detail::declared_params<ResEncUNetOptions>(), with)
          .img_size(ctx.patch);
  const ResEncTopology t = resenc_plan(o);
  nlohmann::json kernels = nlohmann::json::array(), strides = nlohmann::json::array();
  for (size_t s = 0; s < t.stages(); ++s) {
    kernels.push_back(t.kernels[s]);
    strides.push_back(t.strides[s]);
  }
  nlohmann::json kwargs = {{"input_channels", ctx.in_channels},
                           {"num_classes", ctx.num_classes},
                           {"n_stages", t.stages()},
                           {"features_per_stage", t.features},
                           {"conv_op", "torch.nn.modules.conv.Conv3d"},
                           {"kernel_sizes", kernels},
                           {"strides", strides},
                           {"n_blocks_per_stage", t.blocks},
                           {"n_conv_per_stage_decoder", std::vector<int64_t>(t.stages() - 1, o.decoder_convs())},
                           {"conv_bias", true},
                           {"norm_op", "torch.nn.modules.instancenorm.InstanceNorm3d"},
                           {"norm_op_kwargs", {{"eps", 1e-05}, {"affine", true}}},
                           {"dropout_op", nullptr},
                           {"dropout_op_kwargs", nullptr},
                           {"nonlin", "torch.nn.LeakyReLU"},
                           {"nonlin_kwargs", {{"inplace", true}}},
                           {"deep_supervision", o.deep_supervision()}};
  return {{"class", "dynamic_network_architectures.architectures.unet.ResidualEncoderUNet"},
          {"kwargs", kwargs},
          {"_kw_requires_import", {"conv_op", "norm_op", "dropout_op", "nonlin"}}};
}

}  // namespace

// This network's registry entry: CMake lists S_entry() of every src/models/nets/S.cpp for registry()
// (generated voxfit_model_entries.h); the helpers are in registry_support.h.
ModelEntry resenc_unet_entry() {
  ModelEntry e = detail::entry_for<ResEncUNetOptions>(
      "resenc_unet",
      "nnU-Net v2 ResidualEncoderUNet (ResEnc M/L/XL): stages and pooling per axis from the patch, as nnU-Net plans",
      TaskKind::kSegmentation3d, ModelContext{}, 62815736, [](ResEncUNetOptions o, const ModelContext& ctx) -> Network {
        return std::make_shared<ResEncUNetImpl>(o.in_channels(ctx.in_channels)
                                                    .num_classes(ctx.num_classes)
                                                    .img_size(ctx.patch)
                                                    .checkpoint(ctx.checkpoint)
                                                    .channels_last(ctx.channels_last));
      });
  e.listing_order = 15;
  e.recipe.optimizer = "sgd";  // nnU-Net's trainer: SGD, Nesterov 0.99, lr 1e-2, poly
  // voxfit's names are nnU-Net's canonical ones; export adds the aliases nnU-Net's state dict has.
  e.reference = ReferenceImplementation{"nnunet", [](const std::string& name) { return name; }, nnunet_constructor,
                                        nnunet_aliases};
  // dynamic_network_architectures 0.4.4 with nnunetv2 2.8.1's ResEnc planner rules, 1 in, 14 out.
  e.reference_counts = {
      {"resenc_unet_128", {}, 102359430, {128, 128, 128}},
      {"resenc_unet_192", {}, 102359430, {192, 192, 192}},
      {"resenc_unet_256", {}, 141903124, {256, 256, 256}},
      {"resenc_unet_small_32", {{"base_features", "8"}, {"max_features", "64"}}, 1622330, {32, 32, 32}}};
  return e;
}

}  // namespace voxfit::models
