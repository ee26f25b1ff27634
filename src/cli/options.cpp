#include "voxfit/cli/options.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "voxfit/core/error.h"
#include "voxfit/core/runtime.h"
#include "voxfit/kernels/conv_of_concat.h"
#include "voxfit/kernels/instance_norm_act.h"

namespace voxfit::cli {

namespace {

// Boost.Program_options formats its error messages by replacing placeholders such as %value% with
// the offending text; a value that itself holds a placeholder makes that loop forever (voxfit
// hung on `--lr %value%`). Such text is refused before Boost sees it.
void refuse_placeholders(const std::string& text, const std::string& where) {
  for (const char* p :
       {"%value%", "%canonical_option%", "%option%", "%prefix_option%", "%original_token%", "%invalid_line%"})
    if (text.find(p) != std::string::npos)
      throw ConfigError(where + ": '" + p + "' is not allowed in an option or value");
}

std::string section_of(const std::string& command) {
  std::string s = command;
  for (char& c : s)
    if (c == ' ') c = '.';
  return s;
}

// Turns a config file into command-line tokens so the file is validated exactly like the command line.
std::vector<std::string> config_tokens(const std::string& file, const std::string& command,
                                       const po::options_description& desc) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))  // a folder opens as an empty stream
    throw ConfigError(file + ": cannot open config file (" +
                      (std::filesystem::exists(file, ec) ? "not a file" : "not found") + ")");
  std::ifstream stream(file);
  if (!stream) throw ConfigError(file + ": cannot open config file");
  const std::string content((std::istreambuf_iterator<char>(stream)), std::istreambuf_iterator<char>());
  refuse_placeholders(content, file);
  std::istringstream in(content);
  po::options_description none;
  po::parsed_options parsed(&none);
  try {
    parsed = po::parse_config_file(in, none, /*allow_unregistered=*/true);
  } catch (const po::error& e) {
    throw ConfigError(file + ": " + e.what());
  }
  const std::string own = section_of(command) + ".";
  // A key in the command's own section overrides the same key at top level.
  std::map<std::string, std::string> values;
  for (const auto& opt : parsed.options) {
    std::string key = opt.string_key;
    const bool in_section = key.find('.') != std::string::npos;
    if (in_section) {
      if (key.compare(0, own.size(), own) != 0 || key.size() == own.size()) continue;  // another command's section
      key = key.substr(own.size());
    }
    const std::string value = opt.value.empty() ? std::string() : opt.value.front();
    if (in_section || !values.count(key)) values[key] = value;
  }
  std::vector<std::string> tokens;
  for (const auto& [key, value] : values) {
    const po::option_description* d = nullptr;
    try {
      d = key.empty() ? nullptr : desc.find_nothrow(key, false);
    } catch (const po::error& e) {  // find_nothrow still throws for an ambiguous prefix
      throw ConfigError(file + ": key '" + key + "': " + e.what());
    }
    if (d == nullptr || key == "config" || key == "help")
      throw ConfigError(file + ": unknown key '" + key + "' for 'voxfit " + command + "'");
    if (d->semantic()->max_tokens() == 0) {
      if (value == "true" || value == "1" || value == "yes" || value == "on")
        tokens.push_back("--" + key);
      else if (!(value == "false" || value == "0" || value == "no" || value == "off"))
        throw ConfigError(file + ": key '" + key + "' takes true or false, not '" + value + "'");
      continue;
    }
    tokens.push_back("--" + key + "=" + value);
  }
  return tokens;
}

// A value as an .ini line writes it: the shortest decimal that reads back as the same double.
std::string ini_value(const boost::any& v) {
  if (const auto* s = boost::any_cast<std::string>(&v)) return *s;
  if (const auto* b = boost::any_cast<bool>(&v)) return *b ? "true" : "false";
  if (const auto* i = boost::any_cast<int>(&v)) return std::to_string(*i);
  if (const auto* i = boost::any_cast<std::int64_t>(&v)) return std::to_string(*i);
  if (const auto* u = boost::any_cast<std::uint64_t>(&v)) return std::to_string(*u);
  if (const auto* d = boost::any_cast<double>(&v)) {
    for (int digits = 1;; ++digits) {
      std::ostringstream out;
      out.precision(digits);
      out << *d;
      if (digits >= 17 || std::stod(out.str()) == *d) return out.str();
    }
  }
  throw ConfigError("--print-config: an option of an unexpected type");
}

// --print-config: every option of `visible` that has a value (its default included) as an .ini
// (one top-level key a line); what only prints or reads files (help, config) is left out.
std::string effective_config(const CommandSpec& spec, const po::options_description& visible,
                             const po::variables_map& vm) {
  std::ostringstream out;
  out << "# voxfit " << spec.name << ": the effective options (voxfit " << spec.name << " --config FILE reads them)\n";
  for (const auto& option : visible.options()) {
    const std::string& key = option->long_name();
    if (key == "help" || key == "config" || key == "print-config" || !vm.count(key)) continue;
    out << key << " = " << ini_value(vm[key].value()) << "\n";
  }
  return out.str();
}

}  // namespace

void warn_deprecated(const std::string& old_spelling, const std::string& new_spelling) {
  static std::set<std::string> warned;
  if (warned.insert(old_spelling).second)
    std::cerr << "voxfit: " << old_spelling << " is deprecated; use " << new_spelling << " (same values)\n";
}

bool parse_on_off(const std::string& value, const std::string& option) {
  if (value == "on") return true;
  if (value == "off") return false;
  throw ConfigError(option + ": expected on or off, got '" + value + "'");
}

std::optional<bool> parse_auto_on_off(const std::string& value, const std::string& option) {
  if (value == "auto") return std::nullopt;
  if (value == "on" || value == "off") return value == "on";
  throw ConfigError(option + ": expected auto, on or off, got '" + value + "'");
}

// Boost's defaults without option guessing: `--bat 4` is an unknown option, not `--batch 4`.
constexpr int kStyle = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;

bool parse_command(CommandSpec& spec, const std::vector<std::string>& args, po::variables_map& vm) {
  po::options_description generic("General");
  generic.add_options()("help,h", "print this help and exit")(
      "print-config", po::bool_switch(),
      "print the effective options (defaults, --config file and command line) as an .ini that --config "
      "accepts back, and exit")("config", po::value<std::string>()->value_name("FILE.ini"),
                                "read options from an .ini file (the command line wins)")(
      "threads", po::value<int>()->default_value(0)->value_name("N"), kThreadsHelp)(
      "kernels", po::value<std::string>()->default_value("fused")->value_name("MODE"),
      "fused: voxfit's CUDA kernels where they apply (instance norm + activation + residual on CUDA "
      "tensors of a CUDA build; batch norm folded into cuDNN's fused convolution + bias + ReLU for "
      "CUDA inference; on every device SwinUNETR's window moves as gathers and no conv bias an instance norm "
      "cancels), LibTorch's operators elsewhere; aten: LibTorch's operators everywhere, the "
      "reference path")("lean-decoders", po::value<std::string>()->default_value("off")->value_name("on|off"),
                        "with --kernels fused on CUDA: decoders keep their upsampled input and skip for backward, not "
                        "the concatenation of the two (the same arithmetic; on an H100 6-20% less memory for UNETR / "
                        "SwinUNETR, 4-8% slower: a memory option)");
  po::options_description visible;
  visible.add(spec.options).add(generic);
  po::options_description all;
  all.add(visible).add(spec.hidden);

  const std::string where = "voxfit " + spec.name;
  for (const auto& a : args) refuse_placeholders(a, where);
  try {
    po::store(po::command_line_parser(args).options(all).positional(spec.positional).style(kStyle).run(), vm);
  } catch (const po::error& e) {
    throw ConfigError(where + ": " + e.what() + " (see 'voxfit " + spec.name + " --help')");
  }
  if (vm.count("help")) {
    std::cout << "usage: " << spec.usage << "\n\n" << spec.summary << "\n\n" << visible << std::flush;
    return false;
  }
  // Where --threads came from, for its range check's message.
  std::string threads_from = where;
  if (vm.count("config")) {
    const std::string file = vm["config"].as<std::string>();
    if (vm["threads"].defaulted()) threads_from = file;
    const auto tokens = config_tokens(file, spec.name, all);
    try {
      po::store(po::command_line_parser(tokens).options(all).style(kStyle).run(), vm);
    } catch (const po::error& e) {
      throw ConfigError(file + ": " + e.what());
    }
  }
  try {
    po::notify(vm);
  } catch (const po::error& e) {
    throw ConfigError(where + ": " + e.what() + " (see 'voxfit " + spec.name + " --help')");
  }
  if (vm["print-config"].as<bool>()) {
    std::cout << effective_config(spec, visible, vm) << std::flush;
    return false;
  }
  const int threads = vm["threads"].as<int>();
  if (threads < 0 || threads > kMaxThreads)
    throw ConfigError(threads_from + ": --threads must be in 0.." + std::to_string(kMaxThreads));
  configure_threads(threads);
  kernels::set_kernel_mode(kernels::parse_kernel_mode(vm["kernels"].as<std::string>()));
  kernels::set_lean_decoders(parse_on_off(vm["lean-decoders"].as<std::string>(), "--lean-decoders"));
  return true;
}

std::vector<std::string> without_options(const std::vector<std::string>& args, const std::set<std::string>& drop,
                                         const std::set<std::string>& drop_switches) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto eq = args[i].find('=');
    const std::string name = args[i].substr(0, eq);
    if (drop_switches.count(name)) continue;
    if (drop.count(name)) {
      if (eq == std::string::npos) ++i;
      continue;
    }
    out.push_back(args[i]);
  }
  return out;
}

}  // namespace voxfit::cli
