#include <c10/util/Exception.h>

#include <iostream>
#include <string>

#include "voxfit/cli/commands.h"
#include "voxfit/cli/options.h"
#include "voxfit/core/error.h"
#include "voxfit/core/runtime.h"
#include "voxfit/memory/budget.h"

namespace voxfit::cli {

namespace {

struct CommandEntry {
  const char* name;
  const char* summary;
  int (*run)(const Args&);
};

const CommandEntry kCommands[] = {
    {"info", "versions of voxfit and its libraries, devices, memory, threads", cmd_info},
    {"data", "check datasets, prepare the HDF5 cache, benchmark the patch loader", cmd_data},
    {"models", "list the networks; parameters, shapes and static memory of one", cmd_models},
    {"train", "train a network on a dataset (or --batch max: the largest that fits)", cmd_train},
    {"predict", "segment volumes with a trained checkpoint", cmd_predict},
    {"export", "a checkpoint's weights as a PyTorch state dict (MONAI names for UNETR/SwinUNETR)", cmd_export},
    {"sweep", "largest batch and throughput per model, patch, precision and budget", cmd_sweep},
    {"plan", "the largest patch and batch per budget, planned as nnU-Net plans, decided by training", cmd_plan},
    {"bench", "the ResNet50 / ViT reference benchmark (3090 / A40 protocol)", cmd_bench},
    {"cards", "the GPU table; predicted batch and speed on cards you do not have", cmd_cards},
};

void print_usage(std::ostream& out) {
  out << "usage: voxfit <command> [options]    (voxfit <command> --help for its options)\n\n"
         "voxfit finds the largest batch that trains a 3D segmentation network under a memory\n"
         "budget (an RTX 3090's 24 GB, an A40's 48 GB, or any), and the throughput at each batch,\n"
         "by training on real volumes.\n\ncommands:\n";
  for (const auto& c : kCommands) {
    std::string name = c.name;
    name.resize(10, ' ');
    out << "  " << name << c.summary << "\n";
  }
  out << "\n  --version  print the version\n  --help     print this help\n";
}

// c10 errors carry a backtrace after the first line; one line is what a user needs.
std::string first_line(const std::string& s) {
  const auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

}  // namespace

int run(int argc, char** argv) {
  memory::default_cuda_allocator_settings();
  memory::default_host_allocator_settings();
  const Args all(argv + 1, argv + argc);
  if (all.empty() || all[0] == "--help" || all[0] == "-h" || all[0] == "help") {
    print_usage(std::cout);
    return all.empty() ? 2 : 0;
  }
  if (all[0] == "--version") {
    std::cout << "voxfit " << voxfit_version() << "\n";
    return 0;
  }
  const CommandEntry* cmd = nullptr;
  for (const auto& c : kCommands)
    if (all[0] == c.name) cmd = &c;
  if (cmd == nullptr) {
    std::cerr << "voxfit: error: unknown command '" << all[0] << "' (see 'voxfit --help')\n";
    return 2;
  }
  try {
    return cmd->run(Args(all.begin() + 1, all.end()));
  } catch (const Error& e) {
    std::cerr << "voxfit: error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const c10::Error& e) {
    std::cerr << "voxfit: error: " << first_line(e.what_without_backtrace()) << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "voxfit: error: out of host memory\n";
    return 1;
  } catch (const std::exception& e) {
    // A scripted network's error: the interpreter's traceback comes first, what failed last.
    std::cerr << "voxfit: error: " << (is_script_error(e.what()) ? error_line(e.what()) : first_line(e.what())) << "\n";
    return 1;
  }
}

}  // namespace voxfit::cli
