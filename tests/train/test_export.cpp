// voxfit export: the state dict read back with torch::pickle_load (what torch.load reads in
// Python), its keys against MONAI 1.5's own state-dict keys and shapes for the same settings
// (tests/train/data/monai_*_keys.txt, written by tests/python/monai_keys.py), its values against
// the checkpointed network, the sidecar, and the one-line errors.
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "support/test_support.h"
#include "voxfit/core/atomic_file.h"
#include "voxfit/core/error.h"
#include "voxfit/models/monai_names.h"
#include "voxfit/train/checkpoint.h"
#include "voxfit/train/export.h"

namespace voxfit::train {
namespace export_test {
namespace {

namespace fs = std::filesystem;

struct NetSpec {
  std::string model;
  models::ModelContext ctx;
};

// MONAI's UNETR fixes 12 layers; the rest is small enough to build in a moment on a CPU.
NetSpec small_unetr() {
  NetSpec n{"unetr", {}};
  n.ctx.in_channels = 1;
  n.ctx.num_classes = 3;
  n.ctx.patch = {32, 32, 32};
  n.ctx.params = {
      {"feature_size", "4"}, {"hidden_size", "32"}, {"mlp_dim", "64"}, {"num_heads", "2"}, {"num_layers", "12"}};
  return n;
}

NetSpec small_swin_unetr() {
  NetSpec n{"swin_unetr", {}};
  n.ctx.in_channels = 1;
  n.ctx.num_classes = 3;
  n.ctx.patch = {32, 32, 32};
  n.ctx.params = {{"feature_size", "12"},
                  {"depths", "2,1,1,1"},
                  {"num_heads", "1,1,1,1"},
                  {"window_size", "4"},
                  {"use_v2", "true"}};
  return n;
}

NetSpec small_unet3d() {
  NetSpec n{"unet3d", {}};
  n.ctx.in_channels = 1;
  n.ctx.num_classes = 3;
  n.ctx.patch = {16, 16, 16};
  n.ctx.params = {{"stages", "3"}, {"base_features", "4"}, {"max_features", "16"}, {"norm_name", "batch"}};
  return n;
}

// A checkpoint as voxfit train writes it (its writer, its config keys), of a network whose
// weights were moved away from their initialisation; returns that network.
models::Network write_export_checkpoint(const fs::path& path, const NetSpec& n) {
  auto net = models::make_model(n.model, n.ctx);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : net->parameters()) p.add_(torch::randn_like(p));
  }
  StepOptions so;
  so.spatial_augment.reset();
  TrainStep step(net, torch::kCPU, so);
  nlohmann::json params = nlohmann::json::object();
  for (const auto& [k, v] : n.ctx.params) params[k] = v;
  CheckpointMeta meta;
  meta.step = 2;
  meta.best_dice = 0.25;
  meta.config_json = nlohmann::json{
      {"voxfit", "test"},
      {"model", n.model},
      {"model_params", params},
      {"in_channels", n.ctx.in_channels},
      {"classes", n.ctx.num_classes},
      {"patch", n.ctx.patch},
      {"attention", "auto"},
      {"checkpoint", "none"},
      {"channels_last", false},
      {"precision",
       "fp32"}}.dump(2);
  save_checkpoint(path, step, meta);
  return net;
}

std::map<std::string, torch::Tensor> read_state_dict(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto value = torch::pickle_load(bytes);
  EXPECT_TRUE(value.isGenericDict());
  std::map<std::string, torch::Tensor> out;
  for (const auto& e : value.toGenericDict()) out[e.key().toStringRef()] = e.value().toTensor();
  return out;
}

// The pickle (data.pkl) of a torch.save archive.
std::string pickle_of(const fs::path& path) {
  caffe2::serialize::PyTorchStreamReader reader(path.string());
  const auto [data, size] = reader.getRecord("data.pkl");
  return std::string(static_cast<const char*>(data.get()), size);
}

// "key d0,d1,..." lines.
std::map<std::string, std::vector<int64_t>> monai_keys(const std::string& model) {
  std::ifstream in(test::source_dir() / "tests" / "train" / "data" / ("monai_" + model + "_keys.txt"));
  std::map<std::string, std::vector<int64_t>> out;
  std::string key, dims;
  while (in >> key >> dims) {
    std::vector<int64_t> shape;
    std::stringstream ss(dims);
    for (std::string d; std::getline(ss, d, ',');) shape.push_back(std::stoll(d));
    out[key] = shape;
  }
  return out;
}

std::map<std::string, torch::Tensor> named_tensors(const models::Network& net) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : net->named_parameters())
    if (p.value().defined()) out[p.key()] = p.value();
  for (const auto& b : net->named_buffers())
    if (b.value().defined()) out[b.key()] = b.value();
  return out;
}

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(std::ifstream(p)); }

class ExportTest : public test::TempDirTest {
 protected:
  // Exports `n` with MONAI names and checks the dict against the network and MONAI's key list:
  // every exported key is MONAI's, with MONAI's shape, and every MONAI key is exported except
  // those MONAI-only modules in `monai_only` (substrings of the key).
  void expect_monai_state_dict(const NetSpec& n, const std::vector<std::string>& monai_only) {
    const auto net = write_export_checkpoint(dir() / "best.pt", n);
    const auto s = export_state_dict(dir() / "best.pt", dir() / "weights.pt", ExportNames::kReference);
    const auto dict = read_state_dict(dir() / "weights.pt");
    const auto tensors = named_tensors(net);
    EXPECT_EQ(s.model, n.model);
    EXPECT_EQ(s.tensors, static_cast<int64_t>(tensors.size()));
    EXPECT_EQ(s.kept, 0);
    ASSERT_EQ(dict.size(), tensors.size());
    for (const auto& [name, t] : tensors) {
      const std::string key = models::monai_name(n.model, name);
      const auto it = dict.find(key);
      ASSERT_NE(it, dict.end()) << name << " -> " << key;
      EXPECT_TRUE(it->second.device().is_cpu()) << key;
      EXPECT_TRUE(it->second.is_contiguous()) << key;
      EXPECT_FALSE(it->second.requires_grad()) << key;
      EXPECT_TRUE(torch::equal(it->second, t.detach())) << key << " (voxfit " << name << ")";
    }
    const auto monai = monai_keys(n.model);
    ASSERT_FALSE(monai.empty());
    for (const auto& [key, t] : dict) {
      const auto it = monai.find(key);
      ASSERT_NE(it, monai.end()) << key << " is not a key of MONAI's " << n.model;
      EXPECT_EQ(t.sizes().vec(), it->second) << key;
    }
    for (const auto& [key, shape] : monai) {
      bool only = false;
      for (const auto& m : monai_only) only = only || key.find(m) != std::string::npos;
      if (!only) {
        EXPECT_TRUE(dict.count(key)) << "MONAI's " << key << " is not exported";
      }
    }
  }
};

TEST_F(ExportTest, UnetrStateDictHasMonaiNamesShapesAndTheCheckpointsValues) {
  // MONAI 1.5's TransformerBlock always builds a cross-attention branch, unused by UNETR.
  expect_monai_state_dict(small_unetr(), {"cross_attn"});
  const auto dict = read_state_dict(dir() / "weights.pt");
  for (const char* key :
       {"vit.patch_embedding.position_embeddings", "vit.patch_embedding.patch_embeddings.weight",
        "vit.blocks.0.attn.qkv.weight", "vit.blocks.11.attn.out_proj.weight", "vit.blocks.3.mlp.linear1.bias",
        "vit.norm.weight", "encoder1.layer.conv3.conv.weight", "encoder2.blocks.1.0.conv.weight",
        "encoder2.blocks.1.1.conv2.conv.weight", "encoder4.transp_conv_init.conv.weight",
        "decoder5.conv_block.conv3.conv.weight", "out.conv.conv.bias"})
    EXPECT_TRUE(dict.count(key)) << key;

  const auto side = read_json(dir() / "weights.json");
  EXPECT_EQ(side["model"], "unetr");
  EXPECT_EQ(side["weights"], "weights.pt");
  EXPECT_EQ(side["names"], "monai");
  EXPECT_EQ(side["in_channels"], 1);
  EXPECT_EQ(side["classes"], 3);
  EXPECT_EQ(side["patch"], nlohmann::json::array({32, 32, 32}));
  EXPECT_EQ(side["model_params"]["hidden_size"], "32");
  EXPECT_EQ(side["model_params"]["qkv_bias"], "false");  // the default, recorded too
  EXPECT_EQ(side["step"], 2);
  EXPECT_EQ(side["trained_with_voxfit"], "test");
  EXPECT_FALSE(side["voxfit"].get<std::string>().empty());
  EXPECT_EQ(side["monai"]["class"], "monai.networks.nets.UNETR");
  EXPECT_EQ(side["monai"]["kwargs"]["hidden_size"], 32);
  EXPECT_EQ(side["monai"]["kwargs"]["out_channels"], 3);
  EXPECT_EQ(side["monai"]["kwargs"]["img_size"], nlohmann::json::array({32, 32, 32}));
  EXPECT_TRUE(side["voxfit_names_kept"].empty());
}

TEST_F(ExportTest, SwinUnetrStateDictHasExactlyMonaisKeysAndShapes) {
  expect_monai_state_dict(small_swin_unetr(), {});
  const auto dict = read_state_dict(dir() / "weights.pt");
  for (const char* key : {"swinViT.patch_embed.proj.weight", "swinViT.layers1.0.blocks.1.attn.relative_position_index",
                          "swinViT.layers1.0.blocks.0.mlp.linear2.weight",
                          "swinViT.layers4.0.downsample.reduction.weight", "swinViT.layers2c.0.layer.conv1.conv.weight",
                          "encoder10.layer.conv2.conv.weight", "decoder1.transp_conv.conv.weight"})
    EXPECT_TRUE(dict.count(key)) << key;
  const auto side = read_json(dir() / "weights.json");
  EXPECT_EQ(side["monai"]["class"], "monai.networks.nets.SwinUNETR");
  EXPECT_EQ(side["monai"]["kwargs"]["depths"], nlohmann::json::array({2, 1, 1, 1}));
  EXPECT_EQ(side["monai"]["kwargs"]["window_size"], nlohmann::json::array({4, 4, 4}));
  EXPECT_EQ(side["monai"]["kwargs"]["use_v2"], true);
}

// resenc_unet with nnU-Net's names: exactly the keys and shapes of nnU-Net's own state dict
// (tests/python/nnunet_keys.py wrote them), aliases included, so nnU-Net loads it strictly; each
// alias holds the same values as its canonical key.
TEST_F(ExportTest, ResEncUNetExportsNnUNetsStateDictKeyForKey) {
  NetSpec n{"resenc_unet", {}};
  n.ctx.num_classes = 3;
  n.ctx.patch = {32, 32, 32};
  n.ctx.params = {{"base_features", "4"}, {"max_features", "16"}};
  const auto net = write_export_checkpoint(dir() / "best.pt", n);
  const auto s = export_state_dict(dir() / "best.pt", dir() / "weights.pt", ExportNames::kReference);
  const auto dict = read_state_dict(dir() / "weights.pt");
  std::ifstream in(test::source_dir() / "tests" / "train" / "data" / "nnunet_resenc_unet_keys.txt");
  std::map<std::string, std::vector<int64_t>> expected;
  std::string key, dims;
  while (in >> key >> dims) {
    std::vector<int64_t> shape;
    std::stringstream ss(dims);
    for (std::string d; std::getline(ss, d, ',');) shape.push_back(std::stoll(d));
    expected[key] = shape;
  }
  ASSERT_EQ(expected.size(), 524u);
  EXPECT_EQ(dict.size(), expected.size());
  for (const auto& [k, shape] : expected) {
    const auto it = dict.find(k);
    ASSERT_NE(it, dict.end()) << k;
    EXPECT_EQ(it->second.sizes().vec(), shape) << k;
  }
  const auto tensors = named_tensors(net);
  EXPECT_EQ(s.tensors, static_cast<int64_t>(tensors.size()));
  EXPECT_EQ(s.tensors + s.aliases, static_cast<int64_t>(dict.size()));
  EXPECT_EQ(s.renamed, 0);  // voxfit's names are nnU-Net's canonical ones
  for (const auto& [name, t] : tensors) {
    EXPECT_TRUE(torch::equal(dict.at(name), t.detach())) << name;
    if (name.rfind("encoder.", 0) == 0) {
      EXPECT_TRUE(torch::equal(dict.at("decoder." + name), t.detach())) << name;
    }
  }
  const auto side = read_json(s.sidecar);
  EXPECT_EQ(side["names"], "nnunet");
  EXPECT_TRUE(side["monai"].is_null());
  const auto& build = side["reference"]["build"];
  EXPECT_EQ(build["class"], "dynamic_network_architectures.architectures.unet.ResidualEncoderUNet");
  EXPECT_EQ(build["kwargs"]["features_per_stage"], nlohmann::json::array({4, 8, 16, 16}));
  EXPECT_EQ(build["kwargs"]["n_blocks_per_stage"], nlohmann::json::array({1, 3, 4, 6}));
}

TEST_F(ExportTest, VoxfitNamesAndNetworksWithoutMonaiCounterpartKeepVoxfitsNames) {
  for (const auto& n : {small_unet3d(), small_unetr()}) {
    const auto net = write_export_checkpoint(dir() / "last.pt", n);
    // unet3d has no MONAI counterpart: its MONAI-style export is its own names too.
    const auto style = n.model == "unet3d" ? ExportNames::kReference : ExportNames::kVoxfit;
    const auto s = export_state_dict(dir() / "last.pt", dir() / "w.pth", style);
    EXPECT_EQ(s.renamed, 0) << n.model;
    const auto dict = read_state_dict(dir() / "w.pth");
    const auto tensors = named_tensors(net);
    ASSERT_EQ(dict.size(), tensors.size()) << n.model;
    for (const auto& [name, t] : tensors) {
      ASSERT_TRUE(dict.count(name)) << n.model << " " << name;
      EXPECT_TRUE(torch::equal(dict.at(name), t.detach())) << n.model << " " << name;
    }
    if (n.model == "unet3d") {  // batch norm: its running statistics are buffers, exported too
      EXPECT_TRUE(dict.count("encoder0.norm0.running_mean"));
      EXPECT_TRUE(dict.count("encoder0.norm0.num_batches_tracked"));
    }
    const auto side = read_json(dir() / "w.json");
    EXPECT_EQ(side["model"], n.model);
    EXPECT_TRUE(side["monai"].is_null()) << n.model;
  }
}

// torch.load's default since PyTorch 2.6 (weights_only=True) refuses every global outside its allow
// list; LibTorch's pickle_save tags a typed dict with torch.jit._pickle.restore_type_tag, which is
// not on it (tests/python/check_export.py loads the export with weights_only=True).
TEST_F(ExportTest, StateDictNamesNoTorchScriptTypeTagThatTorchLoadWeightsOnlyRefuses) {
  write_export_checkpoint(dir() / "last.pt", small_unet3d());
  export_state_dict(dir() / "last.pt", dir() / "w.pt", ExportNames::kVoxfit);
  const std::string pkl = pickle_of(dir() / "w.pt");
  EXPECT_NE(pkl.find("_rebuild_tensor_v2"), std::string::npos);
  EXPECT_EQ(pkl.find("torch.jit"), std::string::npos);
  EXPECT_EQ(pkl.find("restore_type_tag"), std::string::npos);
  // The check sees the tag where LibTorch's own pickle_save of a typed dict writes it.
  const auto tagged = torch::pickle_save(c10::IValue(c10::Dict<std::string, at::Tensor>()));
  write_file_atomic(dir() / "tagged.pt", std::string(tagged.begin(), tagged.end()));
  EXPECT_NE(pickle_of(dir() / "tagged.pt").find("restore_type_tag"), std::string::npos);
}

// MONAI's own UNETR and SwinUNETR, loaded with the export in Python, compute what voxfit's network
// computes (tests/python/check_export.py --input --expect): the names map parameters that play the
// same part, not only ones of the same shape. Needs python3 with torch and MONAI; MONAI comes from
// the environment's PYTHONPATH or the staged .shared-data/peers (tools/stage-device-data.sh), and
// the test is skipped where neither has it (a fresh clone).
TEST_F(ExportTest, MonaisNetworkWithTheExportComputesVoxfitsOutput) {
  std::string pythonpath = (test::source_dir() / ".shared-data" / "peers").string();
  if (const char* env = std::getenv("PYTHONPATH")) pythonpath += std::string(":") + env;
  const std::string python = "PYTHONPATH='" + pythonpath + "' python3";
  if (std::system((python + " -c 'import torch, monai' >/dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "python3 with torch and MONAI is not available";
  // SwinUNETR's bottleneck is 1/32 of its input, and MONAI's instance norm refuses a single voxel.
  NetSpec swin = small_swin_unetr();
  swin.ctx.patch = {64, 64, 64};
  for (const auto& n : {small_unetr(), swin}) {
    const auto net = write_export_checkpoint(dir() / "best.pt", n);
    export_state_dict(dir() / "best.pt", dir() / "weights.pt", ExportNames::kReference);
    torch::manual_seed(3);
    const auto x = torch::randn({1, 1, n.ctx.patch[0], n.ctx.patch[1], n.ctx.patch[2]});
    net->eval();
    torch::Tensor y;
    {
      torch::NoGradGuard no_grad;
      y = net->forward(x).at(0);
    }
    for (const auto& [name, t] : {std::pair{"x.pt", x}, std::pair{"y.pt", y}}) {
      const auto bytes = torch::pickle_save(c10::IValue(t));
      write_file_atomic(dir() / name, std::string(bytes.begin(), bytes.end()));
    }
    const std::string cmd = python + " '" + (test::source_dir() / "tests" / "python" / "check_export.py").string() +
                            "' '" + (dir() / "weights.pt").string() + "' --input '" + (dir() / "x.pt").string() +
                            "' --expect '" + (dir() / "y.pt").string() + "' > '" + (dir() / "check.log").string() +
                            "' 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream log(dir() / "check.log");
    const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    EXPECT_EQ(rc, 0) << n.model << ":\n" << text;
    EXPECT_NE(text.find("output against voxfit's"), std::string::npos) << n.model << ":\n" << text;
    fs::remove(dir() / "best.pt");
  }
}

TEST_F(ExportTest, MissingOrCorruptCheckpointAndMissingFolderAreOneLineErrorsNamingThePath) {
  const auto message = [](const auto& fn) -> std::string {
    try {
      fn();
    } catch (const IoError& e) {
      return e.what();
    }
    return "(no IoError)";
  };
  const fs::path missing = dir() / "nope.pt";
  auto m = message([&] { export_state_dict(missing, dir() / "w.pt"); });
  EXPECT_NE(m.find(missing.string()), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;

  const fs::path corrupt = dir() / "corrupt.pt";
  std::ofstream(corrupt) << "not a checkpoint";
  m = message([&] { export_state_dict(corrupt, dir() / "w.pt"); });
  EXPECT_NE(m.find(corrupt.string()), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;

  write_export_checkpoint(dir() / "best.pt", small_unet3d());
  const fs::path nowhere = dir() / "no_such_folder" / "w.pt";
  m = message([&] { export_state_dict(dir() / "best.pt", nowhere); });
  EXPECT_NE(m.find((dir() / "no_such_folder").string()), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(dir() / "w.pt"));
  EXPECT_FALSE(fs::exists(dir() / "w.json"));

  EXPECT_THROW(parse_export_names("timm"), ConfigError);
  EXPECT_THROW(export_state_dict(dir() / "best.pt", dir() / "weights.json"), ConfigError);
}

}  // namespace
}  // namespace export_test
}  // namespace voxfit::train
