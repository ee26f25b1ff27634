#include <iostream>

#include "voxfit/cli/commands.h"
#include "voxfit/cli/options.h"

namespace voxfit::cli {

int cmd_sweep(const Args& args) {
  CommandSpec spec{"sweep", "voxfit sweep [options]", "Not implemented yet (issue #6)."};
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  std::cerr << "voxfit sweep: not implemented yet (issue #6)\n";
  return 2;
}

}  // namespace voxfit::cli
