#include "voxfit/models/network.h"

#include <torch/torch.h>

#include <sstream>

#include "voxfit/core/error.h"
#include "voxfit/models/shape_checks.h"

namespace voxfit::models {

AttentionMode parse_attention(const std::string& text, const std::string& what) {
  if (text == "auto") return AttentionMode::kAuto;
  if (text == "math") return AttentionMode::kMath;
  if (text == "sdpa") return AttentionMode::kSdpa;
  throw ConfigError(what + ": expected auto, math or sdpa, got '" + text + "'");
}

CheckpointMode parse_checkpoint(const std::string& text, const std::string& what) {
  if (text == "none") return CheckpointMode::kNone;
  if (text == "blocks") return CheckpointMode::kBlocks;
  if (text == "all") return CheckpointMode::kAll;
  throw ConfigError(what + ": expected none, blocks or all, got '" + text + "'");
}

std::string to_string(AttentionMode mode) {
  switch (mode) {
    case AttentionMode::kMath:
      return "math";
    case AttentionMode::kSdpa:
      return "sdpa";
    case AttentionMode::kAuto:
      break;
  }
  return "auto";
}

std::string to_string(CheckpointMode mode) {
  switch (mode) {
    case CheckpointMode::kBlocks:
      return "blocks";
    case CheckpointMode::kAll:
      return "all";
    case CheckpointMode::kNone:
      break;
  }
  return "none";
}

std::string to_string(TaskKind task) {
  return task == TaskKind::kSegmentation3d ? "3D segmentation" : "2D classification";
}

std::vector<std::vector<int64_t>> NetworkImpl::output_shapes(const std::vector<int64_t>& input_shape) {
  check_input(input_shape);
  torch::NoGradGuard no_grad;
  const auto param = parameters();
  const auto opts = param.empty() ? torch::TensorOptions() : param.front().options().requires_grad(false);
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& t : forward(torch::zeros(input_shape, opts))) shapes.push_back(t.sizes().vec());
  return shapes;
}

int64_t count_parameters(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

void check_channels(const std::string& net, const std::vector<int64_t>& shape, int spatial_dims, int64_t channels) {
  const std::string layout = spatial_dims == 3 ? "[B, C, D, H, W]" : "[B, C, H, W]";
  if (static_cast<int>(shape.size()) != spatial_dims + 2)
    throw ModelError(net + ": input " + shape_to_string(shape) + " must be " + layout);
  for (const int64_t s : shape)
    if (s < 1) throw ModelError(net + ": input " + shape_to_string(shape) + " has an empty dimension");
  if (shape[1] != channels)
    throw ModelError(net + ": input " + shape_to_string(shape) + " has " + std::to_string(shape[1]) +
                     " channels, the network was built for " + std::to_string(channels));
}

void check_divisible(const std::string& net, const std::vector<int64_t>& shape, int64_t divisor,
                     const std::string& why) {
  static const char* const kAxes3[] = {"D", "H", "W"};
  static const char* const kAxes2[] = {"H", "W"};
  const size_t dims = shape.size() - 2;
  std::string bad;
  for (size_t i = 0; i < dims; ++i) {
    if (shape[2 + i] % divisor != 0) {
      const char* axis = dims == 3 ? kAxes3[i] : (dims == 2 ? kAxes2[i] : "?");
      bad += (bad.empty() ? "" : ", ") + std::string(axis) + "=" + std::to_string(shape[2 + i]);
    }
  }
  if (!bad.empty())
    throw ModelError(net + ": spatial size " + bad + " of input " + shape_to_string(shape) + " is not divisible by " +
                     std::to_string(divisor) + " (" + why + ")");
}

void check_patch(const std::string& net, const std::vector<int64_t>& patch, size_t dims, int64_t divisor,
                 const std::string& why) {
  if (patch.size() != dims)
    throw ModelError(net + ": patch " + shape_to_string(patch) + " needs " + std::to_string(dims) + " sizes");
  for (const int64_t s : patch)
    if (s < 1 || s % divisor != 0)
      throw ModelError(net + ": patch " + shape_to_string(patch) + " is not divisible by " + std::to_string(divisor) +
                       " (" + why + ")");
}

void check_spatial_equals(const std::string& net, const std::vector<int64_t>& shape,
                          const std::vector<int64_t>& expected, const std::string& why) {
  const std::vector<int64_t> spatial(shape.begin() + 2, shape.end());
  if (spatial != expected)
    throw ModelError(net + ": input " + shape_to_string(shape) + " has spatial size " + shape_to_string(spatial) +
                     ", expected " + shape_to_string(expected) + " (" + why + ")");
}

}  // namespace voxfit::models
