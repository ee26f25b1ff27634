#pragma once
// Bring your own network: a TorchScript file (torch.jit.script(net).save(path) in Python) wherever a
// registered network's name is accepted. models::find_model(path) gives it an entry of its own, so
// train, sweep, models, cards profile, predict and export treat it as a built-in network.
#include <filesystem>
#include <string>

#include <torch/csrc/jit/api/module.h>

#include "voxfit/models/network.h"

namespace voxfit::models {

/// Whether `model` names a TorchScript file rather than a registered network: it contains a '/' or
/// ends in .ts, .pt, .pth or .jit.
bool is_scripted_model(const std::string& model);

/// The entry of the TorchScript network in the file `path` (loaded and checked once per process):
/// one parameter (deep_supervision: train every output, or the first only), AdamW, and its own
/// names for export (its state dict's, aliases included). Throws IoError naming the file when it is not a TorchScript
/// archive this LibTorch can read (not a zip archive, a damaged one, one written by a newer torch, a torch.save of
/// weights) or when reading it crashes or hangs the reader (tried first in a child process).
const ModelEntry& scripted_entry(const std::string& path);

/// Reads `path` as a TorchScript module on the CPU, with scripted_entry's checks and errors.
torch::jit::Module load_scripted(const std::filesystem::path& path);

/// A TorchScript module as a voxfit network. Its parameters and buffers are registered once each
/// (LibTorch lists a tensor under every path of a shared submodule; stepping it once per path would
/// train it twice) under the module's own dotted names, so checkpoints and export name them as
/// Python's state_dict does. The forward returns the module's tensor, or its list/tuple of tensors
/// (deep supervision, full resolution first); what the forward keeps for backward is charged to the
/// top-level child module whose call made it, where the forward calls children directly.
class ScriptedNetworkImpl : public NetworkImpl {
 public:
  /// `deep_supervision` false: only the first output, also in training.
  ScriptedNetworkImpl(torch::jit::Module module, std::string file, bool deep_supervision = true);
  std::vector<torch::Tensor> forward(const torch::Tensor& x) override;
  TaskKind task() const override { return TaskKind::kSegmentation3d; }
  void check_input(const std::vector<int64_t>& shape) const override;
  void train(bool on = true) override;
  /// The further names of each tensor registered under several (Python's state_dict keeps them all).
  const std::map<std::string, std::vector<std::string>>& aliases() const { return aliases_; }
  /// Parameter entries as LibTorch lists them, one per path (more than parameters() where shared).
  int64_t listed_parameter_entries() const { return listed_entries_; }
  /// The top-level children whose calls mark blocks of the memory breakdown (empty: none can be).
  const std::vector<std::string>& attributed_children() const { return children_; }

 private:
  torch::jit::Module module_;
  std::string file_;
  std::map<std::string, std::vector<std::string>> aliases_;
  int64_t listed_entries_ = 0;
  std::vector<std::string> children_;
  bool deep_supervision_ = true;
};

}  // namespace voxfit::models
