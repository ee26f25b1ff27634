#include <iostream>

#include "voxfit/cli/commands.h"
#include "voxfit/cli/options.h"

namespace voxfit::cli {

int cmd_bench(const Args& args) {
  CommandSpec spec{"bench", "voxfit bench [options]", "Not implemented yet (issue #7)."};
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  std::cerr << "voxfit bench: not implemented yet (issue #7)\n";
  return 2;
}

}  // namespace voxfit::cli
