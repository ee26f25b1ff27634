#include <ATen/Parallel.h>
#include <boost/version.hpp>

#include <cstdio>
#include <iostream>

#include "voxfit/cli/commands.h"
#include "voxfit/cli/options.h"
#include "voxfit/core/paths.h"
#include "voxfit/core/runtime.h"
#include "voxfit/core/units.h"
#include "voxfit/io/library_versions.h"
#include "voxfit/memory/budget.h"

namespace voxfit::cli {

int cmd_info(const Args& args) {
  CommandSpec spec{"info", "voxfit info [--threads N]",
                   "Prints the versions of voxfit and its libraries, the devices with their total and "
                   "free memory, and the thread counts."};
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;

  const auto row = [](const std::string& k, const std::string& v) {
    std::printf("  %-12s %s\n", k.c_str(), v.c_str());
  };
  std::printf("voxfit %s\n", voxfit_version().c_str());
  row("LibTorch", torch_version() + (cuda_runtime_version() != "none" ? " (CUDA build)" : " (CPU only)"));
  row("CUDA", cuda_runtime_version());
  row("cuDNN", cudnn_version());
  row("ITK", io::itk_version());
  row("HDF5", io::hdf5_version());
  row("Boost", std::to_string(BOOST_VERSION / 100000) + "." + std::to_string(BOOST_VERSION / 100 % 1000) + "." +
                   std::to_string(BOOST_VERSION % 100));
  row("threads", "intra-op " + std::to_string(at::get_num_threads()) + ", inter-op " +
                     std::to_string(at::get_num_interop_threads()) + ", hardware " +
                     std::to_string(hardware_threads()));
  std::string allocators = "host: " + memory::host_allocator_settings();
  if (cuda_available()) {
    const std::string conf = memory::cuda_allocator_settings();
    allocators += "; CUDA: " + (conf.empty() ? std::string("LibTorch defaults") : conf);
  }
  row("allocators", allocators);
  row("data", data_dir().string());
  std::printf("devices\n");
  const HostMemory host = host_memory();
  row("cpu", std::to_string(hardware_threads()) + " threads, " + format_bytes(host.total_bytes) + " RAM, " +
                 format_bytes(host.available_bytes) + " available");
  for (const GpuInfo& g : cuda_devices()) {
    row("cuda:" + std::to_string(g.index), g.name + ", compute " + std::to_string(g.major) + "." +
                                               std::to_string(g.minor) + ", " + std::to_string(g.multiprocessors) +
                                               " SMs, " + format_bytes(g.total_bytes) + " total, " +
                                               format_bytes(g.free_bytes) + " free");
  }
  if (const std::string why = no_gpu_reason(); !why.empty()) std::printf("  no GPU used: %s\n", why.c_str());
  return 0;
}

}  // namespace voxfit::cli
