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
#include "voxfit/models/network.h"
#include "voxfit/train/checkpoint.h"

namespace voxfit::train {

namespace fs = std::filesystem;

namespace {

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

}  // namespace

ExportNames parse_export_names(const std::string& text) {
  if (text == "reference" || text == "monai" || text == "nnunet") return ExportNames::kReference;
  if (text == "voxfit") return ExportNames::kVoxfit;
  throw ConfigError("--names: expected reference (monai, nnunet) or voxfit, got '" + text + "'");
}

std::string to_string(ExportNames names) { return names == ExportNames::kReference ? "reference" : "voxfit"; }

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
  // The reference implementation's names where the network's entry has them (ModelEntry::reference).
  const auto& reference = models::find_model(model).reference;
  const bool renaming = names == ExportNames::kReference && reference;
  nlohmann::json kept = nlohmann::json::array();
  c10::Dict<std::string, at::Tensor> dict;
  const auto add = [&](const std::string& name, const torch::Tensor& t) {
    if (!t.defined()) return;  // LibTorch registers absent biases and norm statistics as undefined
    const std::string key = renaming ? reference->name(name) : name;
    std::vector<std::string> keys{key};
    if (renaming && reference->aliases)
      for (const auto& alias : reference->aliases(key)) keys.push_back(alias);
    const auto tensor = t.detach().to(torch::kCPU).contiguous().clone();
    for (const auto& k : keys) {
      if (dict.contains(k)) throw Error("export: two tensors map to '" + k + "' (a voxfit bug)");
      dict.insert(k, tensor);  // aliases share the tensor, as in the reference's state dict
    }
    summary.aliases += static_cast<int64_t>(keys.size()) - 1;
    if (key != name)
      ++summary.renamed;
    else if (renaming)
      kept.push_back(name);
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
                               {"names", renaming ? reference->framework : to_string(ExportNames::kVoxfit)},
                               {"monai", renaming && reference->framework == "monai" ? reference->constructor(ctx, params)
                                                                                      : nlohmann::json(nullptr)},
                               {"reference", renaming ? nlohmann::json{{"framework", reference->framework},
                                                                       {"build", reference->constructor(ctx, params)}}
                                                      : nlohmann::json(nullptr)},
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
