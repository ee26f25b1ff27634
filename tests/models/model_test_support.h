#pragma once
// Small settings of every registered network, shared by the models tests: each builds and runs
// a forward/backward in well under a second on 2 CPU cores.
#include <torch/torch.h>

#include <map>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "voxfit/models/network.h"

namespace voxfit::test {

struct SmallNet {
  std::string model;
  std::map<std::string, std::string> params;
  std::vector<int64_t> patch;
  int in_channels;
  int classes;
  /// Convolution biases an instance norm cancels (nnU-Net's conv stacks), which `--kernels fused`
  /// leaves out.
  bool cancelled_biases = false;
};

/// GoogleTest prints a test's parameter in its log: the network's name, not the struct's bytes.
inline void PrintTo(const SmallNet& n, std::ostream* os) { *os << n.model; }

/// The small settings a network's own test file adds (SmallNetRegistrar at namespace scope): a new
/// network joins the per-network suites (gradients, fused against reference, checkpointing,
/// channels-last, shapes) from its own test, no shared list to edit.
inline std::vector<SmallNet>& registered_small_nets() {
  static std::vector<SmallNet> nets;
  return nets;
}
struct SmallNetRegistrar {
  explicit SmallNetRegistrar(SmallNet net) { registered_small_nets().push_back(std::move(net)); }
};

/// One small, fast setting per network (all code paths: DS heads, shifted windows with padding,
/// shrunken windows, v2 blocks, projection shortcuts): the original networks' here, then those
/// registered by the networks' own tests. GoogleTest evaluates a suite's parameters after static
/// initialisation, so every registration is in.
inline std::vector<SmallNet> small_nets() {
  std::vector<SmallNet> nets = {
      {"unet3d", {{"stages", "4"}, {"base_features", "4"}, {"max_features", "12"}}, {16, 32, 16}, 2, 3, true},
      {"unetr",
       {{"feature_size", "4"}, {"hidden_size", "24"}, {"mlp_dim", "48"}, {"num_heads", "4"}, {"num_layers", "4"}},
       {32, 32, 16},
       1,
       3},
      // 64 x 32 x 32: the deepest map is 2x1x1 (at 1^3 InstanceNorm has one element and zeroes its
      // input); stage 3 shifts along one axis only, where the window did not shrink.
      {"swin_unetr", {{"feature_size", "12"}, {"use_v2", "true"}}, {64, 32, 32}, 1, 3},
      {"resnet50", {{"blocks_per_stage", "1,1,1,1"}, {"zero_init_last", "false"}}, {64, 64}, 3, 5},
      {"vit_base_patch16_224",
       {{"hidden_size", "32"}, {"mlp_dim", "64"}, {"num_heads", "4"}, {"num_layers", "2"}},
       {32, 48},
       3,
       5},
  };
  nets.insert(nets.end(), registered_small_nets().begin(), registered_small_nets().end());
  return nets;
}

/// small_nets()'s setting of `model`.
inline SmallNet small_net(const std::string& model) {
  for (const auto& n : small_nets())
    if (n.model == model) return n;
  throw std::invalid_argument("small_nets() has no " + model);
}

inline models::ModelContext context_of(const SmallNet& n) {
  models::ModelContext ctx = models::find_model(n.model).defaults;
  ctx.params = n.params;
  ctx.patch = n.patch;
  ctx.in_channels = n.in_channels;
  ctx.num_classes = n.classes;
  return ctx;
}

inline std::vector<int64_t> input_shape(const SmallNet& n, int64_t batch) {
  std::vector<int64_t> s = {batch, n.in_channels};
  s.insert(s.end(), n.patch.begin(), n.patch.end());
  return s;
}

/// A scalar that depends on every output element with a different weight, so every parameter
/// that influences the outputs gets a non-zero gradient.
inline torch::Tensor weighted_sum(const std::vector<torch::Tensor>& outputs) {
  torch::Tensor loss = torch::zeros({});
  for (const auto& o : outputs) {
    const auto w = torch::linspace(-1.0, 1.0, o.numel(), o.options()).view(o.sizes());
    loss = loss + (o * w).sum();
  }
  return loss;
}

}  // namespace voxfit::test
