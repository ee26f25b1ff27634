#include <iostream>

#include "voxfit/cli/commands.h"
#include "voxfit/cli/options.h"

namespace voxfit::cli {

int cmd_cards(const Args& args) {
  CommandSpec spec{"cards", "voxfit cards [options]", "Not implemented yet (issue #9)."};
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  std::cerr << "voxfit cards: not implemented yet (issue #9)\n";
  return 2;
}

}  // namespace voxfit::cli
