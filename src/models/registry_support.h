#pragma once
// What a network's registry entry is written with (internal to src/models): each
// src/models/nets/S.cpp defines `ModelEntry S_entry()` beside its network, and CMake lists every
// such file in the generated voxfit_model_entries.h that registry() reads. entry_for<Options>
// makes the entry from the parameters the options struct declares (params.h): their names, defaults
// and help for `voxfit models` and the command line, and their typed reading from a ModelContext.
#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "voxfit/core/error.h"
#include "voxfit/core/units.h"
#include "voxfit/models/blocks/layers.h"
#include "voxfit/models/network.h"

namespace voxfit::models::detail {

/// A parameter default as `voxfit models` prints it and Params reads it back.
inline std::string text(int64_t v) { return std::to_string(v); }
inline std::string text(bool v) { return v ? "true" : "false"; }
inline std::string text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}
inline std::string text(const std::string& v) { return v; }
inline std::string text(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}
inline std::string text(const std::vector<double>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + text(v[i]);
  return s;
}

/// "feature_size" -> "--feature-size".
inline std::string option_name(const std::string& param) {
  std::string s = "--" + param;
  std::replace(s.begin(), s.end(), '_', '-');
  return s;
}

/// The reference context of the 2D classifiers: 3 channels, 1000 classes, 224x224.
inline ModelContext classification_context() {
  ModelContext ctx;
  ctx.in_channels = 3;
  ctx.num_classes = 1000;
  ctx.patch = {224, 224};
  return ctx;
}

/// Typed reads of ModelContext::params (or the declared default); errors name the CLI option.
class Params {
 public:
  Params(std::string model, std::vector<ModelParam> declared, const ModelContext& ctx)
      : model_(std::move(model)), declared_(std::move(declared)), ctx_(ctx) {}

  int64_t integer(const std::string& name, int64_t min = 1) const {
    const std::string v = raw(name);
    const auto out = to_integer(v);
    if (!out) fail(name, v, "an integer");
    if (*out < min) fail(name, v, "an integer >= " + std::to_string(min));
    return *out;
  }

  double real(const std::string& name) const {
    const std::string v = raw(name);
    const auto out = to_number(v);
    if (!out || !(*out > 0)) fail(name, v, "a positive number");
    return *out;
  }

  bool flag(const std::string& name) const {
    const std::string v = raw(name);
    if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
    if (v == "false" || v == "0" || v == "no" || v == "off") return false;
    fail(name, v, "true or false");
    return false;
  }

  std::vector<int64_t> integers(const std::string& name) const {
    const std::string v = raw(name);
    std::vector<int64_t> out;
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ',')) {
      const auto x = to_integer(item);
      if (!x || *x < 1) fail(name, v, "a comma-separated list of positive integers");
      out.push_back(*x);
    }
    if (out.empty()) fail(name, v, "a comma-separated list of positive integers");
    return out;
  }

  std::vector<double> reals(const std::string& name) const {
    const std::string v = raw(name);
    std::vector<double> out;
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ',')) {
      const auto x = to_number(item);
      if (!x || !(*x > 0)) fail(name, v, "a comma-separated list of positive numbers");
      out.push_back(*x);
    }
    if (out.empty()) fail(name, v, "a comma-separated list of positive numbers");
    return out;
  }

  std::string norm(const std::string& name) const {
    const std::string v = raw(name);
    if (!is_norm_name(v)) fail(name, v, "instance, instance_affine, batch or none");
    return v;
  }

  /// The value of `name` as a field of type T (params.h's types); integers at least `min`, and a
  /// `norm_name` a make_norm name.
  template <class T>
  T get(const std::string& name, int64_t min) const {
    if constexpr (std::is_same_v<T, int64_t>)
      return integer(name, min);
    else if constexpr (std::is_same_v<T, bool>)
      return flag(name);
    else if constexpr (std::is_same_v<T, double>)
      return real(name);
    else if constexpr (std::is_same_v<T, std::vector<int64_t>>)
      return integers(name);
    else if constexpr (std::is_same_v<T, std::vector<double>>)
      return reals(name);
    else {
      static_assert(std::is_same_v<T, std::string>, "a declared parameter of an unsupported type");
      return name == "norm_name" ? norm(name) : raw(name);
    }
  }

 private:
  std::string raw(const std::string& name) const {
    const auto it = ctx_.params.find(name);
    if (it != ctx_.params.end()) return it->second;
    for (const auto& p : declared_)
      if (p.name == name) return p.default_value;
    throw ModelError(model_ + ": parameter '" + name + "' is not declared");  // a registry bug
  }
  [[noreturn]] void fail(const std::string& name, const std::string& value, const std::string& expected) const {
    throw ConfigError(option_name(name) + " (" + model_ + "): expected " + expected + ", got '" + value + "'");
  }

  std::string model_;
  std::vector<ModelParam> declared_;
  const ModelContext& ctx_;
};

template <class O, class = void>
struct HasMinimum : std::false_type {};
template <class O>
struct HasMinimum<O, std::void_t<decltype(O::minimum(std::string()))>> : std::true_type {};

/// The least value of the integer parameter `name` of options O: O::minimum(name) where declared, else 1.
template <class O>
int64_t minimum_of(const std::string& name) {
  if constexpr (HasMinimum<O>::value)
    return O::minimum(name);
  else
    return 1;
}

/// The parameters options O declares (params.h), with O's defaults as text.
template <class O>
std::vector<ModelParam> declared_params() {
  const O defaults;
  std::vector<ModelParam> out;
  O::for_each_param([&](const char* name, auto member, const char* help) {
    out.push_back({name, text(defaults.*member), help});
  });
  return out;
}

/// Options O with every declared parameter read from `ctx.params` (or its default).
template <class O>
O read_params(const std::string& model, const std::vector<ModelParam>& declared, const ModelContext& ctx) {
  const Params p(model, declared, ctx);
  O o;
  O::for_each_param([&](const char* name, auto member, const char*) {
    using T = std::decay_t<decltype(o.*member)>;
    o.*member = p.get<T>(name, minimum_of<O>(name));
  });
  return o;
}

/// The registry entry of a network with options O: its parameters are O's declared ones, and
/// `build(options read from the context, ctx)` sets the rest (channels, classes, patch,
/// checkpointing, layout) and builds it.
/// `overrides` replaces declared defaults (a variant of a network: swin_unetr_v2 is swin_unetr with
/// use_v2 true).
template <class O, class Build>
ModelEntry entry_for(std::string name, std::string summary, TaskKind task, ModelContext defaults,
                     int64_t reference_parameters, Build build,
                     const std::map<std::string, std::string>& overrides = {}) {
  ModelEntry e;
  e.name = std::move(name);
  e.summary = std::move(summary);
  e.task = task;
  e.params = declared_params<O>();
  e.defaults = std::move(defaults);
  e.reference_parameters = reference_parameters;
  for (auto& p : e.params)
    if (const auto it = overrides.find(p.name); it != overrides.end()) p.default_value = it->second;
  e.make = [model = e.name, declared = e.params, build](const ModelContext& ctx) -> Network {
    return build(read_params<O>(model, declared, ctx), ctx);
  };
  return e;
}

}  // namespace voxfit::models::detail
