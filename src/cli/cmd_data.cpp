#include <iostream>

#include "voxfit/cli/commands.h"
#include "voxfit/cli/options.h"

namespace voxfit::cli {

int cmd_data(const Args& args) {
  CommandSpec spec{"data", "voxfit data [options]", "Not implemented yet (issue #3)."};
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  std::cerr << "voxfit data: not implemented yet (issue #3)\n";
  return 2;
}

}  // namespace voxfit::cli
