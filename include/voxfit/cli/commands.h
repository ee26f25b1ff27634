#pragma once
// One function per `voxfit` subcommand; each gets the arguments after its name and returns the
// process exit status. Errors are thrown as voxfit::Error and reported by app.cpp.
#include <string>
#include <vector>

namespace voxfit::cli {

using Args = std::vector<std::string>;

int cmd_info(const Args& args);
int cmd_data(const Args& args);
int cmd_models(const Args& args);
int cmd_train(const Args& args);
int cmd_predict(const Args& args);
int cmd_export(const Args& args);
int cmd_sweep(const Args& args);
int cmd_plan(const Args& args);
int cmd_bench(const Args& args);
int cmd_cards(const Args& args);

/// The whole program: dispatches argv[1] to a command.
int run(int argc, char** argv);

}  // namespace voxfit::cli
