#include "voxfit/cli/model_options.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "voxfit/cli/train_options.h"
#include "voxfit/core/error.h"
#include "voxfit/core/units.h"

namespace voxfit::cli {

namespace {

std::string dashed(const std::string& name) {
  std::string s = name;
  std::replace(s.begin(), s.end(), '_', '-');
  return s;
}

// One help line per distinct parameter: its meaning and each model's default.
std::map<std::string, std::string> parameter_help() {
  std::map<std::string, std::string> help, defaults;
  for (const auto& entry : models::registry()) {
    for (const auto& p : entry.params) {
      if (!help.count(p.name)) help[p.name] = p.help;
      defaults[p.name] += (defaults[p.name].empty() ? "" : "; ") + entry.name + ": " + p.default_value;
    }
  }
  for (auto& [name, text] : help) text += " [" + defaults[name] + "]";
  return help;
}

int positive(const po::variables_map& vm, const std::string& key) {
  const int v = vm[key].as<int>();
  if (v < 1) throw ConfigError("--" + key + " must be >= 1, got " + std::to_string(v));
  return v;
}

}  // namespace

void add_model_options(CommandSpec& spec) {
  po::options_description group("Model");
  group.add_options()("model", po::value<std::string>()->value_name("NAME"),
                      "network name (voxfit models lists them) or a TorchScript file (net.ts)")(
      "in-channels", po::value<int>()->value_name("N"),
      "input channels [model default: 1 for the 3D nets, 3 for the 2D ones]")(
      "classes", po::value<int>()->value_name("N"),
      "output classes [model default: 14 for the 3D nets, 1000 for the 2D ones]")(
      "patch", po::value<std::string>()->value_name("SIZE"),
      "input size: one value for every axis or one per axis, D,H,W (64,96,96) [model default: 96 3D, 224 2D]")(
      "attention", po::value<std::string>()->default_value("auto")->value_name("MODE"),
      "attention kernel: auto (sdpa where LibTorch 2.x has it), math or sdpa")(
      "recompute", po::value<std::string>()->default_value("none")->value_name("MODE"),
      "activation recomputation (gradient checkpointing): none, blocks (transformer blocks, UNet "
      "encoder stages, ResNet bottlenecks) or all (every block, the decoders too)")(
      "checkpoint", po::value<std::string>()->value_name("MODE"), "the old spelling of --recompute (deprecated)")(
      "channels-last", po::value<std::string>()->default_value("auto")->implicit_value("on")->value_name("auto|on|off"),
      "channels-last memory format (ChannelsLast3d for 3D nets); auto: on for the networks measured faster "
      "that way (unet3d) on a CUDA device, else off");
  add_architecture_options(group);
  spec.options.add(group);
}

void add_architecture_options(po::options_description& group) {
  for (const auto& [name, help] : parameter_help())
    group.add_options()(dashed(name).c_str(), po::value<std::string>()->value_name("VALUE"), help.c_str());
}

std::vector<int64_t> parse_patch(const std::string& text, size_t dims, const std::string& what) {
  std::vector<int64_t> sizes;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto v = to_integer(item);
    if (!v || *v < 1) throw ConfigError(what + ": expected positive integers like 96 or 64,96,96, got '" + text + "'");
    sizes.push_back(*v);
  }
  if (sizes.size() == 1) sizes.assign(dims, sizes.front());
  if (sizes.size() != dims)
    throw ConfigError(what + ": expected 1 or " + std::to_string(dims) + " sizes for this model, got '" + text + "'");
  return sizes;
}

std::string recompute_text(const po::variables_map& vm) {
  const std::string now = vm.count("recompute") ? vm["recompute"].as<std::string>() : "none";
  if (!vm.count("checkpoint")) return now;
  warn_deprecated("--checkpoint MODE", "--recompute MODE");
  const std::string old = vm["checkpoint"].as<std::string>();
  if (vm.count("recompute") && !vm["recompute"].defaulted() && now != old)
    throw ConfigError("--recompute " + now + " and --checkpoint " + old + " (its old spelling) disagree");
  return old;
}

models::ModelContext model_context_from(const po::variables_map& vm, const std::string& model, bool only_own_params) {
  const models::ModelEntry& entry = models::find_model(model);
  models::ModelContext ctx = entry.defaults;
  if (vm.count("in-channels")) ctx.in_channels = positive(vm, "in-channels");
  if (vm.count("classes")) ctx.num_classes = positive(vm, "classes");
  if (vm.count("patch")) ctx.patch = parse_patch(vm["patch"].as<std::string>(), entry.defaults.patch.size());
  if (vm.count("attention")) ctx.attention = models::parse_attention(vm["attention"].as<std::string>());
  ctx.checkpoint =
      models::parse_checkpoint(recompute_text(vm), vm.count("checkpoint") ? "--checkpoint" : "--recompute");
  if (vm.count("channels-last")) {
    // true / false: what .ini files of the earlier on/off switch hold.
    const std::string text = vm["channels-last"].as<std::string>();
    const auto requested = parse_auto_on_off(text == "true" ? "on" : text == "false" ? "off" : text, "--channels-last");
    const torch::Device device = vm.count("device") ? parse_device(vm["device"].as<std::string>()) : torch::kCPU;
    ctx.channels_last = models::resolve_channels_last(entry, requested, device);
  }
  for (auto& [name, value] : architecture_params_from(vm, model, only_own_params)) ctx.params[name] = value;
  return ctx;
}

std::map<std::string, std::string> architecture_params_from(const po::variables_map& vm, const std::string& model,
                                                            bool only_own_params) {
  const models::ModelEntry& entry = models::find_model(model);
  std::map<std::string, std::string> params;
  for (const auto& [name, help] : parameter_help()) {
    const std::string key = dashed(name);
    if (!vm.count(key) || vm[key].as<std::string>().empty()) continue;
    const bool own = std::any_of(entry.params.begin(), entry.params.end(),
                                 [&n = name](const models::ModelParam& p) { return p.name == n; });
    if (!own && only_own_params) continue;
    if (!own) {
      std::string names;
      for (const auto& p : entry.params) names += (names.empty() ? "" : ", ") + ("--" + dashed(p.name));
      throw ConfigError("--" + key + " is not a parameter of " + model +
                        (names.empty() ? " (it has none)" : " (its parameters: " + names + ")"));
    }
    params[name] = vm[key].as<std::string>();
  }
  return params;
}

}  // namespace voxfit::cli
