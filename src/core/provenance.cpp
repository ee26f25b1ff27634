#include "voxfit/core/provenance.h"

#include <unistd.h>

#include <fstream>

#include "voxfit/core/runtime.h"
#include "voxfit_git_commit.h"

namespace voxfit {

namespace {

std::string host_name() {
  char name[256] = {0};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "cpu";
}

}  // namespace

std::string voxfit_commit() { return VOXFIT_GIT_COMMIT; }

nlohmann::json provenance(const torch::Device& device) {
  std::string name = cpu_model();
  if (device.is_cuda())
    for (const GpuInfo& g : cuda_devices())
      if (g.index == device.index()) name = g.name;
  return {{"voxfit", voxfit_version()},
          {"commit", voxfit_commit()},
          {"libtorch", torch_version()},
          {"cuda", cuda_runtime_version()},
          {"cudnn", cudnn_version()},
          {"device", name},
          {"driver", device.is_cuda() ? cuda_driver_version() : "none"},
          {"host", host_name()}};
}

}  // namespace voxfit
