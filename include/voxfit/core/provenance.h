#pragma once
// Where a number came from: voxfit's version and commit, LibTorch / CUDA / cuDNN versions, the
// device and its driver, and the host. Every sweep entry, run config.json and bench JSON holds it.
#include <torch/types.h>
#include <nlohmann/json.hpp>

namespace voxfit {

/// The git commit voxfit was built from ("0123abcd4567", "-dirty" when the tree had changes,
/// "unknown" outside a checkout).
std::string voxfit_commit();

/// {"voxfit", "commit", "libtorch", "cuda", "cudnn", "device", "driver", "host"} for `device`
/// ("cpu" devices name the CPU's model from /proc/cpuinfo where it has one; "driver" is "none").
nlohmann::json provenance(const torch::Device& device);

}  // namespace voxfit
