#include "voxfit/cli/commands.h"

int main(int argc, char** argv) { return voxfit::cli::run(argc, argv); }
