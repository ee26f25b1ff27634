#pragma once
// The contract between every network and the rest of voxfit (train, sweep, bench): one base
// module, a context that says what the network is built for, and a name -> factory registry.
#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "voxfit/models/activation_estimate.h"

namespace voxfit::models {

/// How transformer blocks compute attention: `math` is the explicit matmul-softmax, `sdpa` is
/// LibTorch's fused scaled_dot_product_attention (2.x), `auto` picks sdpa where it exists.
enum class AttentionMode { kAuto, kMath, kSdpa };
/// Activation checkpointing: none, each transformer block / UNet stage, or every block.
/// What a "block" is per network is documented on each network's options (`checkpoint` field).
enum class CheckpointMode { kNone, kBlocks, kAll };

/// "auto" | "math" | "sdpa"; throws ConfigError naming `what` otherwise.
AttentionMode parse_attention(const std::string& text, const std::string& what = "--attention");
/// "none" | "blocks" | "all"; throws ConfigError naming `what` otherwise.
CheckpointMode parse_checkpoint(const std::string& text, const std::string& what = "--checkpoint");
std::string to_string(AttentionMode mode);
std::string to_string(CheckpointMode mode);

/// What a network is built for; set from the CLI (`--in-channels`, `--classes`, `--patch`,
/// `--attention`, `--checkpoint`, `--channels-last`) and from model parameters.
/// These defaults suit the 3D segmentation nets; each ModelEntry carries its own defaults
/// (`ModelEntry::defaults`: 3 channels, 1000 classes, 224x224 for the 2D classifiers).
struct ModelContext {
  int in_channels = 1;
  int num_classes = 14;
  std::vector<int64_t> patch = {96, 96, 96};  ///< spatial input size (3 values for 3D nets, 2 for 2D)
  AttentionMode attention = AttentionMode::kAuto;
  CheckpointMode checkpoint = CheckpointMode::kNone;
  bool channels_last = false;
  /// Architecture parameters by name (e.g. "feature_size" -> "24"); unknown names are errors.
  std::map<std::string, std::string> params;
};

enum class TaskKind { kSegmentation3d, kClassification2d };
/// "3D segmentation" / "2D classification".
std::string to_string(TaskKind task);

/// Base of every voxfit network.
class NetworkImpl : public torch::nn::Module {
 public:
  /// Segmentation: logits [B, classes, D, H, W] at full resolution first, then the lower-resolution
  /// deep-supervision outputs (highest first) while the module is training; only the first in eval.
  /// Classification: one tensor [B, classes].
  virtual std::vector<torch::Tensor> forward(const torch::Tensor& x) = 0;
  virtual TaskKind task() const = 0;
  /// Throws ModelError naming the offending dimensions if `shape` ([B, C, spatial...]) is not an
  /// input this network accepts.
  virtual void check_input(const std::vector<int64_t>& shape) const = 0;
  /// The shapes forward() returns for an input of `input_shape` in the current mode (training
  /// or eval). Networks compute this from their architecture without running; the default runs
  /// a forward pass on zeros under NoGradGuard.
  virtual std::vector<std::vector<int64_t>> output_shapes(const std::vector<int64_t>& input_shape);
  /// Inference only: folds what eval mode makes a constant affine map (BatchNorm's running
  /// statistics) into the preceding convolution's weights and bias, so that eval forwards run one
  /// fused convolution + bias (+ add) + ReLU per unit (kernels::conv2d_bias_act). Call after the
  /// weights reach their final device, dtype and memory format; training forwards are unchanged.
  /// Returns false where the network has nothing to fold (the default).
  virtual bool fold_for_inference() { return false; }
  /// What a training forward on `input_shape` keeps for backward, per top-level block under the
  /// names the forward gives its blocks (core::BlockScope), by the rules of memory_estimate.h, under
  /// autocast to `compute` on `paths`, with `recompute` instead of the network's own checkpointing
  /// where given. nullopt for a network without an analytic model (the default). The input is
  /// checked by the caller (models::estimate_activations).
  virtual std::optional<ActivationEstimate> saved_activations(const std::vector<int64_t>& input_shape,
                                                              c10::ScalarType compute, const KernelPaths& paths,
                                                              std::optional<CheckpointMode> recompute) const {
    return std::nullopt;
  }
};
using Network = std::shared_ptr<NetworkImpl>;

/// One settable architecture parameter of a registered network.
struct ModelParam {
  std::string name;           ///< snake_case, as in ModelContext::params and `--name` on the CLI (dashes)
  std::string default_value;  ///< the reference setting, as text
  std::string help;
};

/// How a network trains unless told otherwise: its reference's optimiser ("adamw" or "sgd"; the
/// learning rate, weight decay, clipping and schedule are that optimiser's defaults,
/// train::OptimizerOptions::defaults_for and train::default_schedule). Deep supervision is the
/// network's own parameter where it has one.
struct TrainingRecipe {
  std::string optimizer = "adamw";
};

/// The reference implementation a network is built from, for `voxfit export`: its parameter names
/// and the constructor that builds it with the exported weights.
struct ReferenceImplementation {
  std::string framework;  ///< "monai" or "nnunet"
  /// The reference's state-dict key for voxfit's dotted parameter or buffer name; a name with no
  /// counterpart comes back unchanged.
  std::function<std::string(const std::string& name)> name;
  /// {"class": "monai.networks.nets.UNETR", "kwargs": {...}} for `ctx` and every declared parameter
  /// as text; null where the reference cannot build this configuration.
  std::function<nlohmann::json(const ModelContext& ctx, const std::map<std::string, std::string>& params)> constructor;
  /// Further keys under which the reference's state dict holds the same tensor as the reference
  /// name `key` (nnU-Net's modules registered twice); none where null. A strict load_state_dict
  /// of the reference needs them.
  std::function<std::vector<std::string>(const std::string& key)> aliases;
};

/// A configuration whose parameter count the reference implementation states (tested for every
/// entry: tests/models/test_parameter_counts.cpp).
struct ReferenceCount {
  std::string label;                          ///< "swin_unetr_24"
  std::map<std::string, std::string> params;  ///< on top of the entry's defaults
  int64_t parameters = 0;
  std::vector<int64_t> patch = {};  ///< the patch, where it shapes the network (empty: the default's)
};

struct ModelEntry {
  std::string name;     ///< "unetr"
  std::string summary;  ///< one line for `voxfit models`
  TaskKind task = TaskKind::kSegmentation3d;
  std::vector<ModelParam> params;
  std::function<Network(const ModelContext&)> make;
  /// The context of the reference setting: channels, classes and patch where the generic
  /// ModelContext defaults do not fit (2D nets: 3 channels, 1000 classes, 224x224).
  ModelContext defaults;
  /// Parameters of the network built from `defaults` (MONAI 1.3 / timm count; tested).
  int64_t reference_parameters = 0;
  /// `--channels-last auto` on a CUDA device: the layout measured faster for this network's
  /// training step (UNet3D: convolutions and instance norms only, +12% on an H100; the transformer
  /// networks lose, docs/performance-notes.md 22 and 24).
  bool channels_last_on_cuda = false;
  /// Position in registry() and `voxfit models` (ascending, ties by name): unet3d 10, unetr 20,
  /// swin_unetr 30, resnet50 40, vit_base_patch16_224 50; a network that sets none lists after them.
  int listing_order = 100;
  TrainingRecipe recipe;
  /// Where voxfit export can name the weights as the reference implementation does.
  std::optional<ReferenceImplementation> reference;
  /// Further configurations with stated counts, besides `defaults` (reference_parameters).
  std::vector<ReferenceCount> reference_counts;
  /// Further registry entries of the same file (a family's sizes: mednext_s's file also registers
  /// mednext_b, _m and _l); registry() lists each as an entry of its own.
  std::vector<ModelEntry> variants;
};

/// The layout of `entry` on `device` for `--channels-last` auto (nullopt), on or off.
bool resolve_channels_last(const ModelEntry& entry, std::optional<bool> requested, const torch::Device& device);

/// Every network of src/models/nets/ (each file's entry, listed by CMake at configure time), in
/// the order `voxfit models` lists them (ModelEntry::listing_order).
const std::vector<ModelEntry>& registry();
/// The entry of `name`, or of the TorchScript file `name` names (models/scripted.h: a path, or a
/// name ending in .ts, .pt, .pth or .jit); throws ConfigError listing the known names.
const ModelEntry& find_model(const std::string& name);
/// Builds `name` for `ctx` (validates params and shapes; throws ConfigError / ModelError).
/// Start `ctx` from find_model(name).defaults so the 2D nets get their own channels and size.
Network make_model(const std::string& name, const ModelContext& ctx);

/// Number of parameters (elements) of a module.
int64_t count_parameters(const torch::nn::Module& m);

/// Bytes of the static training state: fp32 weights, their gradients and AdamW's two moments
/// (16 bytes a parameter); activations and workspace come on top.
inline int64_t static_training_bytes(int64_t parameters) { return parameters * 16; }

/// "[2, 14, 96, 96, 96]".
std::string shape_to_string(const std::vector<int64_t>& shape);

}  // namespace voxfit::models
