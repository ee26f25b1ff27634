// The name -> factory registry. Each network's entry lives beside it (src/models/nets/S.cpp defines
// S_entry(), written with registry_support.h); CMake lists every file of src/models/nets/ in the
// generated voxfit_model_entries.h, so a new network touches only its own files. The list
// references every entry function, so none is dropped from the static library.
#include <torch/torch.h>

#include <algorithm>
#include <set>

#include "voxfit/core/error.h"
#include "voxfit/models/network.h"
#include "voxfit/models/scripted.h"
#include "voxfit_model_entries.h"  // generated: generated_model_entries()

#include "registry_support.h"

namespace voxfit::models {

using detail::option_name;

const std::vector<ModelEntry>& registry() {
  static const std::vector<ModelEntry> entries = [] {
    std::vector<ModelEntry> out;
    for (auto& e : generated_model_entries()) {
      auto variants = std::move(e.variants);
      out.push_back(std::move(e));
      for (auto& v : variants) out.push_back(std::move(v));
    }
    std::stable_sort(out.begin(), out.end(), [](const ModelEntry& a, const ModelEntry& b) {
      return a.listing_order != b.listing_order ? a.listing_order < b.listing_order : a.name < b.name;
    });
    std::set<std::string> names;
    for (const auto& e : out)
      if (!names.insert(e.name).second) throw ModelError("two networks register the name '" + e.name + "'");
    return out;
  }();
  return entries;
}

const ModelEntry& find_model(const std::string& name) {
  if (is_scripted_model(name)) return scripted_entry(name);
  std::string known;
  for (const auto& e : registry()) {
    if (e.name == name) return e;
    known += (known.empty() ? "" : ", ") + e.name;
  }
  throw ConfigError("unknown model '" + name + "' (known: " + known + "; or a TorchScript file, e.g. ./net.ts)");
}

bool resolve_channels_last(const ModelEntry& entry, std::optional<bool> requested, const torch::Device& device) {
  return requested.value_or(entry.channels_last_on_cuda && device.is_cuda());
}

Network make_model(const std::string& name, const ModelContext& ctx) {
  const ModelEntry& entry = find_model(name);
  for (const auto& [key, value] : ctx.params) {
    const bool declared = std::any_of(entry.params.begin(), entry.params.end(),
                                      [&key = key](const ModelParam& p) { return p.name == key; });
    if (!declared) {
      std::string names;
      for (const auto& p : entry.params) names += (names.empty() ? "" : ", ") + option_name(p.name);
      throw ConfigError(option_name(key) + " is not a parameter of " + name +
                        (names.empty() ? " (it has none)" : " (its parameters: " + names + ")"));
    }
  }
  if (ctx.in_channels < 1) throw ConfigError("--in-channels must be >= 1, got " + std::to_string(ctx.in_channels));
  if (ctx.num_classes < 1) throw ConfigError("--classes must be >= 1, got " + std::to_string(ctx.num_classes));
  const size_t dims = entry.task == TaskKind::kSegmentation3d ? 3 : 2;
  if (ctx.patch.size() != dims)
    throw ModelError(name + ": patch " + shape_to_string(ctx.patch) + " needs " + std::to_string(dims) + " sizes (" +
                     to_string(entry.task) + ")");
  Network net = entry.make(ctx);
  std::vector<int64_t> shape = {1, ctx.in_channels};
  shape.insert(shape.end(), ctx.patch.begin(), ctx.patch.end());
  net->check_input(shape);
  return net;
}

}  // namespace voxfit::models
