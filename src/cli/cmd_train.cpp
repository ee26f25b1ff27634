#include <iostream>

#include "voxfit/cli/commands.h"
#include "voxfit/cli/options.h"

namespace voxfit::cli {

int cmd_train(const Args& args) {
  CommandSpec spec{"train", "voxfit train [options]", "Not implemented yet (issue #5)."};
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  std::cerr << "voxfit train: not implemented yet (issue #5)\n";
  return 2;
}

}  // namespace voxfit::cli
