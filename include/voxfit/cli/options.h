#pragma once
// Boost.Program_options for one `voxfit <command>`: --help, --config FILE.ini (command line wins
// over the file), --threads, and errors turned into one-line ConfigErrors.
#include <boost/program_options.hpp>

#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace voxfit::cli {

namespace po = boost::program_options;

/// What a command declares: its options, positional arguments and a usage line.
struct CommandSpec {
  CommandSpec(std::string name_, std::string usage_, std::string summary_)
      : name(std::move(name_)), usage(std::move(usage_)), summary(std::move(summary_)) {}
  std::string name;     ///< "train", "data check"
  std::string usage;    ///< "voxfit train --dataset D --model M [options]"
  std::string summary;  ///< one sentence, printed under the usage line
  po::options_description options{"Options"};
  po::options_description hidden{"Internal"};  ///< parsed, not listed by --help (a child process's own)
  po::positional_options_description positional;
};

/// "on" -> true, "off" -> false; throws ConfigError naming `option` (e.g. "--cuda-graph") otherwise.
bool parse_on_off(const std::string& value, const std::string& option);
/// "auto" -> nullopt, "on" / "off" -> true / false; throws ConfigError naming `option` otherwise.
std::optional<bool> parse_auto_on_off(const std::string& value, const std::string& option);

/// Parses `args` (after the command name). Returns false when --help was given (usage printed to
/// stdout). A config file may hold keys at top level or in a [section] named after the command
/// (spaces as dots: [data.check]); sections of other commands are ignored, unknown keys are errors.
bool parse_command(CommandSpec& spec, const std::vector<std::string>& args, po::variables_map& vm);

/// `args` without the options in `drop` (each with its value, also as --name=value) and the
/// switches in `drop_switches` (no value): the command line a child process runs, before adding
/// its own values for those options.
std::vector<std::string> without_options(const std::vector<std::string>& args, const std::set<std::string>& drop,
                                         const std::set<std::string>& drop_switches = {});

/// Tells the user once per process, on stderr, that `old_spelling` is deprecated in favour of
/// `new_spelling` (the old one keeps working).
void warn_deprecated(const std::string& old_spelling, const std::string& new_spelling);

/// The threads option every command takes, applied by parse_command.
inline constexpr const char* kThreadsHelp =
    "intra-op CPU threads for LibTorch (0 = OMP_NUM_THREADS if set, else one per hardware thread)";

}  // namespace voxfit::cli
