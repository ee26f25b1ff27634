#include <iostream>

#include "voxfit/cli/commands.h"
#include "voxfit/cli/options.h"

namespace voxfit::cli {

int cmd_models(const Args& args) {
  CommandSpec spec{"models", "voxfit models [options]", "Not implemented yet (issue #4)."};
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  std::cerr << "voxfit models: not implemented yet (issue #4)\n";
  return 2;
}

}  // namespace voxfit::cli
