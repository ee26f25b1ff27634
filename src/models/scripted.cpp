// A TorchScript file as a voxfit network (issue 49): loaded in a child process first (a damaged
// archive must not crash voxfit), its tensors registered once each under their Python names, its
// forward instrumented so that the memory breakdown charges each top-level child, and its entry
// checked with one small forward per context before anything trains.
#include "voxfit/models/scripted.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/library.h>
#include <torch/script.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>

#include "voxfit/core/block_scope.h"
#include "voxfit/core/error.h"
#include "voxfit/core/isolated.h"
#include "voxfit/core/runtime.h"

#include "registry_support.h"

namespace voxfit::models {

namespace fs = std::filesystem;

namespace {

// The block marks the instrumented forward calls around each top-level child (their alias analysis
// is conservative: they have side effects, so no pass drops or moves them).
void enter_block(const std::string& name) {
  if (auto* observer = core::block_observer()) observer->enter_block(name);
}
void leave_block(const std::string& name) {
  if (auto* observer = core::block_observer()) observer->leave_block(name);
}

TORCH_LIBRARY(voxfit, m) {
  m.def(torch::schema("voxfit::enter_block(str name) -> ()", c10::AliasAnalysisKind::CONSERVATIVE), &enter_block);
  m.def(torch::schema("voxfit::leave_block(str name) -> ()", c10::AliasAnalysisKind::CONSERVATIVE), &leave_block);
}

// The line of an error that says what went wrong (c10 errors without their C++ backtrace), in
// printable ASCII and at most 160 characters: a damaged archive can make LibTorch's parser quote
// bytes it should not have read.
std::string last_line(const std::exception& e) {
  const auto* c10 = dynamic_cast<const c10::Error*>(&e);
  std::string line = error_line(c10 ? c10->what_without_backtrace() : e.what());
  for (char& c : line)
    if (c < 0x20 || c > 0x7e) c = '?';
  if (line.size() > 160) line = line.substr(0, 157) + "...";
  return line;
}

// What is wrong with a file torch::jit::load refused, in words. The kind of archive is read from
// the record names its zip directory holds (TorchScript's constants.pkl and code/, torch.save's
// data.pkl), not from the reader's message, which a damaged archive can garble.
std::string load_problem(const std::string& bytes, const std::exception& e) {
  const std::string what = e.what();
  std::smatch m;
  if (std::regex_search(
          what, m, std::regex(R"(file with version (\d+), but the maximum supported version for reading is (\d+))")))
    return "written by a newer torch than this build's LibTorch " + torch_version() +
           " reads (archive format version " + m[1].str() + "; it reads up to " + m[2].str() +
           "): save it with a torch <= " + torch_version() + " or build voxfit on a newer LibTorch";
  if (bytes.rfind("PK\x03\x04", 0) != 0)
    return "not a TorchScript archive (torch.jit.script(net).save(path) writes one; this is not a zip archive)";
  if (what.find("central directory") != std::string::npos || what.find("failed reading zip") != std::string::npos)
    return "a damaged TorchScript archive (the zip archive is truncated or corrupt)";
  const bool scripted = bytes.find("constants.pkl") != std::string::npos || bytes.find("/code/") != std::string::npos;
  if (!scripted && bytes.find("data.pkl") != std::string::npos)
    return "a PyTorch archive that holds no TorchScript module (torch.save writes weights; voxfit needs "
           "torch.jit.script(net).save(path))";
  return "a damaged TorchScript archive (LibTorch " + torch_version() + " cannot read it: " + last_line(e) + ")";
}

std::string read_bytes(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw IoError(path.string() + ": no such TorchScript file");
  if (!fs::is_regular_file(path, ec)) throw IoError(path.string() + ": not a file (a TorchScript file was expected)");
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) throw IoError(path.string() + ": cannot be read");
  if (bytes.empty()) throw IoError(path.string() + ": empty file (a TorchScript archive was expected)");
  return bytes;
}

torch::jit::Module load_bytes(const std::string& file, const std::string& bytes) {
  torch::jit::Module module;
  try {
    std::istringstream in(bytes);
    module = torch::jit::load(in, torch::kCPU);
  } catch (const std::exception& e) {
    throw IoError(file + ": " + load_problem(bytes, e));
  }
  // LibTorch's torch::save writes tensors as attributes of a module without methods.
  if (!module.find_method("forward"))
    throw IoError(file + ": a TorchScript archive without a forward method (saved weights, not a network?)");
  return module;
}

// The name each top-level child call gets in the memory breakdown: the child's attribute name.
// Calls of children of `self` at the top level of forward() get enter/leave marks around them;
// calls inside branches or loops, and what forward computes itself, stay unmarked.
std::vector<std::string> mark_children(torch::jit::Module& module) {
  std::vector<std::string> marked;
  const auto graph = module.get_method("forward").graph();
  torch::jit::Value* self = graph->inputs().at(0);
  std::vector<std::pair<torch::jit::Node*, std::string>> calls;
  for (torch::jit::Node* node : graph->nodes()) {
    if (node->kind() != c10::prim::CallMethod || node->s(c10::attr::name) != "forward") continue;
    torch::jit::Node* owner = node->input(0)->node();
    if (owner->kind() != c10::prim::GetAttr || owner->input(0) != self) continue;
    calls.emplace_back(node, owner->s(c10::attr::name));
  }
  static const auto kEnter = c10::Symbol::fromQualString("voxfit::enter_block");
  static const auto kLeave = c10::Symbol::fromQualString("voxfit::leave_block");
  for (const auto& [node, name] : calls) {
    {
      torch::jit::WithInsertPoint at(node);
      graph->insert(kEnter, {graph->insertConstant(name)});
    }
    torch::jit::WithInsertPoint after(node->next());
    graph->insert(kLeave, {graph->insertConstant(name)});
    marked.push_back(name);
  }
  return marked;
}

// The holder module of a dotted name's prefix ("encoder.0.conv.weight" -> encoder/0/conv), made
// on first use, so that the registered tensor's name is the module's own.
torch::nn::Module& holder_of(torch::nn::Module& root, const std::string& dotted, std::string& leaf) {
  torch::nn::Module* at = &root;
  std::string rest = dotted;
  for (auto dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
    const std::string part = rest.substr(0, dot);
    rest = rest.substr(dot + 1);
    auto children = at->named_children();
    if (auto* found = children.find(part))
      at = found->get();
    else
      at = at->register_module(part, std::make_shared<torch::nn::Module>(part)).get();
  }
  leaf = rest;
  return *at;
}

// One forward in eval mode at batch 1 on zeros of the context's shape: the network must take the
// dataset's channels and return [1, classes, patch] logits. Throws naming the file.
void check_forward(ScriptedNetworkImpl& net, const std::string& file, const ModelContext& ctx) {
  std::vector<int64_t> shape = {1, ctx.in_channels};
  shape.insert(shape.end(), ctx.patch.begin(), ctx.patch.end());
  const bool was_training = net.is_training();
  net.train(false);
  std::vector<torch::Tensor> out;
  {
    torch::NoGradGuard no_grad;
    out = net.forward(torch::zeros(shape));
  }
  net.train(was_training);
  const auto got = out.front().sizes().vec();
  if (got.size() != shape.size())
    throw ModelError(file + ": the forward returns a tensor of shape " + shape_to_string(got) + " for an input of " +
                     shape_to_string(shape) + "; voxfit trains [batch, classes, D, H, W] logits");
  if (!std::equal(got.begin() + 2, got.end(), shape.begin() + 2))
    throw ModelError(file + ": the forward returns logits of shape " + shape_to_string(got) + " for an input of " +
                     shape_to_string(shape) + "; segmentation logits need the input's spatial size");
  if (got[1] != ctx.num_classes)
    throw ConfigError(file + ": the network predicts " + std::to_string(got[1]) + " classes, the dataset has " +
                      std::to_string(ctx.num_classes) + " (its labels' classes, background included)");
}

}  // namespace

bool is_scripted_model(const std::string& model) {
  if (model.find('/') != std::string::npos) return true;
  const std::string ext = fs::path(model).extension().string();
  return ext == ".ts" || ext == ".pt" || ext == ".pth" || ext == ".jit";
}

torch::jit::Module load_scripted(const fs::path& path) {
  const std::string bytes = read_bytes(path);
  // LibTorch's reader trusts the archive it reads: it reads it first where a crash costs nothing,
  // once per version of the file (a sweep builds the network for every probe; hashing a large
  // network's file each time would cost seconds). A file the child refuses is refused with the
  // child's words: this process never parses it.
  static std::mutex mutex;
  static std::set<std::string> loaded;
  std::error_code ec;
  const std::string key = fs::absolute(path).lexically_normal().string() + "|" + std::to_string(bytes.size()) + "|" +
                          std::to_string(fs::last_write_time(path, ec).time_since_epoch().count());
  bool known;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    known = loaded.count(key) > 0;
  }
  if (!known) {
    const std::string refused = core::verdict_in_child(
        path.string() + ": not a readable TorchScript archive (LibTorch's reader ",
        [&] {
          try {
            (void)load_bytes(path.string(), bytes);
            return std::string();
          } catch (const IoError& e) {
            return std::string(e.what());
          }
        },
        120);
    if (!refused.empty()) throw IoError(refused);
    const std::lock_guard<std::mutex> lock(mutex);
    loaded.insert(key);
  }
  return load_bytes(path.string(), bytes);
}

ScriptedNetworkImpl::ScriptedNetworkImpl(torch::jit::Module module, std::string file, bool deep_supervision)
    : module_(std::move(module)), file_(std::move(file)), deep_supervision_(deep_supervision) {
  // A tensor listed under several paths (a shared submodule) is registered once, under its first.
  std::map<const c10::TensorImpl*, std::string> first;
  const auto add = [&](const std::string& name, const torch::Tensor& t, bool parameter) {
    if (!t.defined()) return;
    const auto [it, fresh] = first.emplace(t.unsafeGetTensorImpl(), name);
    if (!fresh) {
      aliases_[it->second].push_back(name);
      return;
    }
    std::string leaf;
    torch::nn::Module& holder = holder_of(*this, name, leaf);
    if (parameter)
      holder.register_parameter(leaf, t, t.requires_grad());
    else
      holder.register_buffer(leaf, t);
  };
  for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
    ++listed_entries_;
    add(p.name, p.value, true);
  }
  for (const auto& b : module_.named_buffers(/*recurse=*/true)) add(b.name, b.value, false);
  children_ = mark_children(module_);
  module_.train(is_training());
}

std::vector<torch::Tensor> ScriptedNetworkImpl::forward(const torch::Tensor& x) {
  c10::IValue out;
  try {
    // Without top-level children to charge, the whole forward is one block.
    std::optional<core::BlockScope> whole;
    if (children_.empty()) whole.emplace("forward");
    out = module_.forward({x});
  } catch (const c10::OutOfMemoryError&) {
    throw;
  } catch (const std::exception& e) {
    const std::string line = last_line(e);
    // The interpreter rethrows an allocation failure as a plain error: it stays one (the sweep's
    // and the trainer's out-of-memory handling read it).
    if (reports_allocation_failure(line)) throw;
    throw ModelError(file_ + ": the forward fails on an input of " + shape_to_string(x.sizes().vec()) + ": " + line);
  }
  std::vector<torch::Tensor> outputs;
  const auto take = [&](const c10::IValue& v) {
    if (!v.isTensor())
      throw ModelError(file_ + ": the forward returns a " + v.tagKind() +
                       " among its outputs; voxfit trains a tensor or a list or tuple of tensors");
    outputs.push_back(v.toTensor());
  };
  if (out.isTensor())
    take(out);
  else if (out.isTuple())
    for (const auto& v : out.toTupleRef().elements()) take(v);
  else if (out.isList())
    for (const auto& v : out.toListRef()) take(v);
  else
    throw ModelError(file_ + ": the forward returns a " + out.tagKind() +
                     "; voxfit trains a tensor or a list or tuple of tensors");
  if (outputs.empty()) throw ModelError(file_ + ": the forward returns an empty list; voxfit needs the logits");
  for (const auto& o : outputs)
    if (o.dim() != x.dim() || o.size(0) != x.size(0) || o.size(1) != outputs.front().size(1))
      throw ModelError(
          file_ + ": the forward returns a tensor of shape " + shape_to_string(o.sizes().vec()) + " for an input of " +
          shape_to_string(x.sizes().vec()) +
          "; voxfit trains [batch, classes, D, H, W] logits (and lower-resolution ones of the same classes)");
  if (!is_training() || !deep_supervision_) outputs.resize(1);
  return outputs;
}

void ScriptedNetworkImpl::check_input(const std::vector<int64_t>& shape) const {
  if (shape.size() != 5)
    throw ModelError(file_ + ": expects [batch, channels, D, H, W] input, got " + shape_to_string(shape));
}

void ScriptedNetworkImpl::train(bool on) {
  NetworkImpl::train(on);
  module_.train(on);
}

const ModelEntry& scripted_entry(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<ModelEntry>> entries;
  const std::lock_guard<std::mutex> lock(mutex);
  auto& slot = entries[path];
  if (slot) return *slot;

  const fs::path file = path;
  const auto probe = std::make_shared<ScriptedNetworkImpl>(load_scripted(file), path);
  auto entry = std::make_unique<ModelEntry>();
  entry->name = path;
  entry->summary = "TorchScript network " + file.filename().string();
  entry->reference_parameters = count_parameters(*probe);
  entry->recipe.optimizer = "adamw";
  entry->params = {{"deep_supervision", "true",
                    "train every output the network returns (a list or tuple: deep supervision, weighted as "
                    "nnU-Net's); false: the first only"}};
  // Each context's first build runs one check forward (channels, classes, output shape).
  auto checked = std::make_shared<std::set<std::string>>();
  entry->make = [path, checked, params = entry->params](const ModelContext& ctx) -> Network {
    const bool deep_supervision = detail::Params(path, params, ctx).flag("deep_supervision");
    auto net = std::make_shared<ScriptedNetworkImpl>(load_scripted(path), path, deep_supervision);
    // --channels-last on: the 3D weights in ChannelsLast3d (the module holds the same tensors), as
    // the step's inputs are; cuDNN then runs NDHWC convolutions.
    if (ctx.channels_last)
      for (auto& p : net->parameters())
        if (p.dim() == 5) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast3d));
    const std::string key =
        std::to_string(ctx.in_channels) + "|" + std::to_string(ctx.num_classes) + "|" + shape_to_string(ctx.patch);
    static std::mutex check_mutex;
    const std::lock_guard<std::mutex> check_lock(check_mutex);
    if (!checked->count(key)) {
      check_forward(*net, path, ctx);
      checked->insert(key);
    }
    return net;
  };
  ReferenceImplementation ref;
  ref.framework = "torchscript";
  ref.name = [](const std::string& name) { return name; };
  ref.constructor = [path](const ModelContext&, const std::map<std::string, std::string>&) {
    return nlohmann::json{{"class", "torch.jit.load"}, {"kwargs", {{"f", fs::absolute(path).string()}}}};
  };
  ref.aliases = [aliases = probe->aliases()](const std::string& key) {
    const auto it = aliases.find(key);
    return it == aliases.end() ? std::vector<std::string>{} : it->second;
  };
  entry->reference = std::move(ref);
  slot = std::move(entry);
  return *slot;
}

}  // namespace voxfit::models
