#include "voxfit/train/export.h"

#include <ATen/core/Dict.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/error.h"
#include "voxfit/core/runtime.h"
#include "voxfit/models/monai_names.h"
#include "voxfit/models/network.h"
#include "voxfit/train/checkpoint.h"

namespace voxfit::train {

namespace fs = std::filesystem;

namespace {

bool is_true(const std::string& v) { return v == "true" || v == "1" || v == "yes" || v == "on"; }

// torch.save's zip format holding `value`, as torch::pickle_save writes it but without the type
// tags TorchScript adds to a typed dict (a torch.jit._pickle.restore_type_tag call): torch.load's
// weights_only unpickler, the default since PyTorch 2.6, refuses that global.
std::string pickle_untagged(const c10::IValue& value) {
  std::string data;
  torch::jit::Pickler pickler([&](const char* bytes, size_t size) { data.append(bytes, size); }, nullptr, nullptr,
                              nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  std::string archive;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, size_t size) {
    archive.append(static_cast<const char*>(bytes), size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", data.data(), data.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  return archive;
}

std::vector<int64_t> integers(const std::string& v) {
  std::vector<int64_t> out;
  size_t start = 0;
  for (size_t comma; (comma = v.find(',', start)) != std::string::npos; start = comma + 1)
    out.push_back(std::stoll(v.substr(start, comma - start)));
  out.push_back(std::stoll(v.substr(start)));
  return out;
}

// MONAI's norm_name for voxfit's; null where MONAI's blocks have no such choice.
nlohmann::json monai_norm(const std::string& norm) {
  if (norm == "instance" || norm == "batch") return norm;
  if (norm == "instance_affine") return nlohmann::json::array({"instance", {{"affine", true}}});
  return nullptr;
}

// The MONAI class and keyword arguments that build the network these weights belong to (values
// from the registry's parsed parameters: `params` holds every declared parameter); null where
// MONAI has no counterpart. UNETR: MONAI fixes 12 layers, so another num_layers has none either.
nlohmann::json monai_constructor(const std::string& model, const models::ModelContext& ctx,
                                 const std::map<std::string, std::string>& params) {
  nlohmann::json kwargs = {{"in_channels", ctx.in_channels}, {"out_channels", ctx.num_classes}};
  if (model == "unetr") {
    if (params.at("num_layers") != "12") return nullptr;
    kwargs["img_size"] = ctx.patch;
    for (const char* k : {"feature_size", "hidden_size", "mlp_dim", "num_heads"}) kwargs[k] = std::stoll(params.at(k));
    kwargs["qkv_bias"] = is_true(params.at("qkv_bias"));
    kwargs["res_block"] = is_true(params.at("res_block"));
    kwargs["norm_name"] = monai_norm(params.at("norm_name"));
    return {{"class", "monai.networks.nets.UNETR"}, {"kwargs", kwargs}};
  }
  if (model == "swin_unetr") {
    kwargs["feature_size"] = std::stoll(params.at("feature_size"));
    kwargs["depths"] = integers(params.at("depths"));
    kwargs["num_heads"] = integers(params.at("num_heads"));
    const int64_t w = std::stoll(params.at("window_size"));
    kwargs["window_size"] = std::vector<int64_t>{w, w, w};
    kwargs["mlp_ratio"] = std::stod(params.at("mlp_ratio"));
    kwargs["qkv_bias"] = is_true(params.at("qkv_bias"));
    kwargs["normalize"] = is_true(params.at("normalize_hidden"));
    kwargs["use_v2"] = is_true(params.at("use_v2"));
    kwargs["norm_name"] = monai_norm(params.at("norm_name"));
    return {{"class", "monai.networks.nets.SwinUNETR"}, {"kwargs", kwargs}};
  }
  return nullptr;
}

}  // namespace

ExportNames parse_export_names(const std::string& text) {
  if (text == "monai") return ExportNames::kMonai;
  if (text == "voxfit") return ExportNames::kVoxfit;
  throw ConfigError("--names: expected monai or voxfit, got '" + text + "'");
}

std::string to_string(ExportNames names) { return names == ExportNames::kMonai ? "monai" : "voxfit"; }

fs::path export_sidecar_path(const fs::path& output) {
  fs::path p = output;
  return p.replace_extension(".json");
}

ExportSummary export_state_dict(const fs::path& checkpoint, const fs::path& output, ExportNames names) {
  const fs::path sidecar = export_sidecar_path(output);
  if (sidecar == output)
    throw ConfigError(output.string() + ": the weights need another extension than .json (the sidecar's)");
  const fs::path folder = output.parent_path().empty() ? fs::path(".") : output.parent_path();
  if (!fs::is_directory(folder))
    throw IoError(output.string() + ": cannot write: folder " + folder.string() + " does not exist");

  const CheckpointMeta meta = read_checkpoint_meta(checkpoint);
  auto [model, ctx] = checkpoint_model(checkpoint, meta);
  // The layout a run trained in does not change the weights; the dict holds contiguous tensors.
  ctx.channels_last = false;
  const models::Network net = models::make_model(model, ctx);
  load_weights(checkpoint, *net);

  std::map<std::string, std::string> params;
  for (const auto& p : models::find_model(model).params) {
    const auto it = ctx.params.find(p.name);
    params[p.name] = it == ctx.params.end() ? p.default_value : it->second;
  }

  ExportSummary summary;
  summary.model = model;
  summary.sidecar = sidecar;
  const bool monai = names == ExportNames::kMonai && models::has_monai_names(model);
  nlohmann::json kept = nlohmann::json::array();
  c10::Dict<std::string, at::Tensor> dict;
  const auto add = [&](const std::string& name, const torch::Tensor& t) {
    if (!t.defined()) return;  // LibTorch registers absent biases and norm statistics as undefined
    const std::string key = names == ExportNames::kMonai ? models::monai_name(model, name) : name;
    if (dict.contains(key)) throw Error("export: two tensors map to '" + key + "' (a voxfit bug)");
    if (key != name)
      ++summary.renamed;
    else if (monai)
      kept.push_back(name);
    dict.insert(key, t.detach().to(torch::kCPU).contiguous().clone());
    ++summary.tensors;
  };
  for (const auto& p : net->named_parameters()) add(p.key(), p.value());
  for (const auto& b : net->named_buffers()) add(b.key(), b.value());
  summary.kept = static_cast<int64_t>(kept.size());

  const std::string bytes = pickle_untagged(c10::IValue(dict));
  nlohmann::json config = nlohmann::json::parse(meta.config_json);
  const nlohmann::json side = {{"format", "PyTorch state dict (torch.load), parameters and buffers"},
                               {"weights", output.filename().string()},
                               {"model", model},
                               {"model_params", params},
                               {"in_channels", ctx.in_channels},
                               {"classes", ctx.num_classes},
                               {"patch", ctx.patch},
                               {"names", to_string(names)},
                               {"monai", monai ? monai_constructor(model, ctx, params) : nlohmann::json(nullptr)},
                               {"voxfit_names_kept", kept},
                               {"tensors", summary.tensors},
                               {"checkpoint", fs::absolute(checkpoint).string()},
                               {"step", meta.step},
                               {"best_dice", meta.best_dice},
                               {"trained_with_voxfit", config.value("voxfit", "")},
                               {"voxfit", voxfit_version()},
                               {"torch", torch_version()}};
  write_file_atomic(output, bytes);
  write_file_atomic(sidecar, side.dump(2) + "\n");
  return summary;
}

}  // namespace voxfit::train
