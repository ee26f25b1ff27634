#pragma once
// The network options shared by every command that builds one (models, train, sweep, bench):
// declared once here so the CLI and .ini files name them the same everywhere.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "voxfit/cli/options.h"
#include "voxfit/models/network.h"

namespace voxfit::cli {

/// Adds a "Model" group to `spec`: --model, --in-channels, --classes, --patch (`96` or
/// `96,96,64`, D,H,W), --attention, --recompute (and --checkpoint, its deprecated spelling),
/// --channels-last, and one string option
/// `--<param-with-dashes>` per distinct ModelParam name in the registry (unset = the model's default).
void add_model_options(CommandSpec& spec);

/// One string option `--<param-with-dashes>` per distinct ModelParam name in the registry (the
/// architecture parameters: --feature-size, --deep-supervision, ...), added to `group`.
void add_architecture_options(po::options_description& group);

/// The architecture parameters the user gave (add_architecture_options) for `model`, by registry
/// name. Throws ConfigError for a parameter `model` does not have unless `only_own_params`.
std::map<std::string, std::string> architecture_params_from(const po::variables_map& vm, const std::string& model,
                                                            bool only_own_params = false);

/// The context for `model`: its registry entry's defaults (ModelEntry::defaults), overridden by
/// every option the user gave. Throws ConfigError naming the option, also for a parameter the
/// model does not have unless `only_own_params` (a sweep over several models, where each takes
/// the parameters it has and ignores the others').
models::ModelContext model_context_from(const po::variables_map& vm, const std::string& model,
                                        bool only_own_params = false);

/// The --recompute mode as given (none, blocks, all), also through the deprecated --checkpoint
/// (which warns once and must agree with an explicit --recompute).
std::string recompute_text(const po::variables_map& vm);

/// "96" -> `dims` copies; "96,96,64" -> as given (must be `dims` values, each >= 1).
/// Throws ConfigError naming `what`.
std::vector<int64_t> parse_patch(const std::string& text, size_t dims, const std::string& what = "--patch");

}  // namespace voxfit::cli
