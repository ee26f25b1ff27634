#include "voxfit/train/checkpoint.h"

#include <ATen/Context.h>
#include <fcntl.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/error.h"
#include "voxfit/models/scripted.h"

namespace voxfit::train {

namespace fs = std::filesystem;

namespace {

torch::Tensor string_tensor(const std::string& s) {
  auto t = torch::empty({static_cast<int64_t>(s.size())}, torch::kUInt8);
  std::memcpy(t.data_ptr<uint8_t>(), s.data(), s.size());
  return t;
}

std::string tensor_string(const torch::Tensor& t) {
  const auto c = t.contiguous().to(torch::kCPU);
  return std::string(reinterpret_cast<const char*>(c.data_ptr<uint8_t>()), static_cast<size_t>(c.numel()));
}

std::vector<torch::Generator> generators(torch::Device device) {
  std::vector<torch::Generator> g{at::detail::getDefaultCPUGenerator()};
  if (device.is_cuda()) g.push_back(at::globalContext().defaultGenerator(device));
  return g;
}

void write_module(torch::serialize::OutputArchive& a, torch::nn::Module& m) {
  for (const auto& p : m.named_parameters()) a.write("model/" + p.key(), p.value().detach().cpu());
  for (const auto& b : m.named_buffers()) a.write("model/" + b.key(), b.value().cpu(), /*is_buffer=*/true);
}

void read_module(torch::serialize::InputArchive& a, torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.named_parameters()) {
    torch::Tensor t;
    a.read("model/" + p.key(), t);
    if (t.sizes() != p.value().sizes())
      throw Error("parameter '" + p.key() + "' has shape " + c10::str(t.sizes()) + " in the checkpoint, " +
                  c10::str(p.value().sizes()) + " in the network");
    p.value().copy_(t);
  }
  for (auto& b : m.named_buffers()) {
    torch::Tensor t;
    a.read("model/" + b.key(), t, /*is_buffer=*/true);
    b.value().copy_(t);
  }
}

CheckpointMeta read_meta(torch::serialize::InputArchive& a) {
  CheckpointMeta m;
  torch::Tensor step, best, config;
  a.read("meta/step", step);
  a.read("meta/best_dice", best);
  a.read("meta/config", config);
  m.step = step.item<int64_t>();
  m.best_dice = best.item<double>();
  m.config_json = tensor_string(config);
  return m;
}

template <typename Fn>
auto with_archive(const fs::path& path, Fn fn) {
  if (!fs::exists(path)) throw IoError(path.string() + ": checkpoint not found");
  try {
    torch::serialize::InputArchive a;
    a.load_from(path.string());
    return fn(a);
  } catch (const Error& e) {
    throw IoError(path.string() + ": " + e.what());
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    throw IoError(path.string() + ": not a readable voxfit checkpoint (" + what.substr(0, what.find('\n')) + ")");
  }
}

}  // namespace

void save_checkpoint(const fs::path& path, TrainStep& step, const CheckpointMeta& meta) {
  torch::serialize::OutputArchive a;
  write_module(a, step.network());
  for (const auto& [name, t] : step.optimizer().state()) a.write("optim/" + name, t.cpu());
  const auto scaler = step.scaler().state();
  a.write("scaler/scale", scaler[0].cpu());
  a.write("scaler/growth_tracker", scaler[1].cpu());
  const auto gens = generators(step.device());
  for (size_t i = 0; i < gens.size(); ++i) a.write("rng/" + std::to_string(i), gens[i].get_state());
  a.write("meta/step", torch::tensor(meta.step, torch::kLong));
  a.write("meta/best_dice", torch::tensor(meta.best_dice, torch::kDouble));
  a.write("meta/config", string_tensor(meta.config_json));
  AtomicPath out(path);
  const int fd = ::open(out.temp().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw IoError(path.string() + ": cannot write checkpoint (" + std::strerror(errno) + ")");
  // LibTorch's own file writer throws from its destructor when a write fails (a full disk), which
  // ends the process; through this function a failed write is remembered and reported afterwards.
  std::string write_error;
  const auto write = [&](const void* data, size_t size) -> size_t {
    const char* p = static_cast<const char*>(data);
    for (size_t left = size; left > 0 && write_error.empty();) {
      const ssize_t n = ::write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        write_error = std::strerror(errno);
        break;
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
    return size;
  };
  try {
    a.save_to(write);
  } catch (const c10::Error& e) {
    ::close(fd);
    const std::string what = e.what_without_backtrace();
    throw IoError(path.string() + ": cannot write checkpoint (" + what.substr(0, what.find('\n')) + ")");
  }
  if (::close(fd) != 0 && write_error.empty()) write_error = std::strerror(errno);
  if (!write_error.empty()) throw IoError(path.string() + ": cannot write checkpoint (" + write_error + ")");
  out.commit();
}

CheckpointMeta read_checkpoint_meta(const fs::path& path) {
  return with_archive(path, [](torch::serialize::InputArchive& a) { return read_meta(a); });
}

CheckpointMeta load_checkpoint(const fs::path& path, TrainStep& step) {
  return with_archive(path, [&](torch::serialize::InputArchive& a) {
    read_module(a, step.network());
    // Read into fresh tensors: InputArchive::read into a defined tensor would re-point its storage.
    std::vector<std::pair<std::string, torch::Tensor>> state;
    for (const auto& entry : step.optimizer().state()) {
      torch::Tensor t;
      a.read("optim/" + entry.first, t);
      state.emplace_back(entry.first, t);
    }
    step.optimizer().load_state(state);
    torch::Tensor scale, growth;
    a.read("scaler/scale", scale);
    a.read("scaler/growth_tracker", growth);
    step.scaler().load_state({scale, growth});
    auto gens = generators(step.device());
    for (size_t i = 0; i < gens.size(); ++i) {
      torch::Tensor s;
      a.read("rng/" + std::to_string(i), s);
      gens[i].set_state(s);
    }
    return read_meta(a);
  });
}

CheckpointModel checkpoint_model(const fs::path& path, const CheckpointMeta& meta) {
  try {
    const auto c = nlohmann::json::parse(meta.config_json);
    CheckpointModel m;
    m.model = c.at("model").get<std::string>();
    // A TorchScript network's copy lies beside the checkpoint (train's run folder).
    if (models::is_scripted_model(m.model) && fs::path(m.model).is_relative())
      m.model = (path.parent_path() / m.model).string();
    models::ModelContext& ctx = m.context;
    ctx.in_channels = c.at("in_channels").get<int>();
    ctx.num_classes = c.at("classes").get<int>();
    ctx.patch = c.at("patch").get<std::vector<int64_t>>();
    ctx.attention = models::parse_attention(c.at("attention").get<std::string>());
    ctx.channels_last = c.at("channels_last").get<bool>();
    for (const auto& [k, v] : c.at("model_params").items()) ctx.params[k] = v.get<std::string>();
    return m;
  } catch (const nlohmann::json::exception& e) {
    throw IoError(path.string() + ": its config is not what voxfit writes (" + e.what() + ")");
  }
}

CheckpointMeta load_weights(const fs::path& path, models::NetworkImpl& network) {
  return with_archive(path, [&](torch::serialize::InputArchive& a) {
    read_module(a, network);
    return read_meta(a);
  });
}

}  // namespace voxfit::train
