#include "voxfit/cli/train_options.h"

#include <cctype>
#include <iostream>
#include <sstream>

#include "voxfit/core/error.h"
#include "voxfit/core/paths.h"
#include "voxfit/core/runtime.h"
#include "voxfit/data/plan.h"
#include "voxfit/data/preprocess.h"
#include "voxfit/io/dataset.h"
#include "voxfit/memory/card_table.h"
#include "voxfit/sweep/isolated_probe.h"

namespace voxfit::cli {

namespace fs = std::filesystem;

void add_device_options(CommandSpec& spec) {
  po::options_description g("Device and memory budget");
  g.add_options()("device", po::value<std::string>()->default_value("auto")->value_name("DEV"),
                  "auto (cuda:0 when a GPU is visible, else cpu), cpu, cuda, cuda:N")(
      "vram", po::value<std::string>()->value_name("SIZE"),
      "train as on a card with this much CUDA-visible memory (24GiB, 48GB); on CPU: a RAM cap")(
      "card", po::value<std::string>()->value_name("ID"),
      "train as on this card of data/cards.csv (rtx3090, a40, ...): its CUDA-visible memory")(
      "memory-snapshot", po::value<std::string>()->value_name("FILE"),
      "CUDA, LibTorch >= 2.1: write the allocator history as a pickle for pytorch.org/memory_viz "
      "(at the end of the run, or at the step that ran out of memory)");
  spec.options.add(g);
}

torch::Device parse_device(const std::string& text, const std::string& what) {
  if (text == "auto") return cuda_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  if (text == "cpu") return torch::kCPU;
  std::string index = text;
  if (text == "cuda")
    index = "0";
  else if (text.rfind("cuda:", 0) == 0)
    index = text.substr(5);
  if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos)
    throw ConfigError(what + ": '" + text + "' is not auto, cpu, cuda, cuda:N or N");
  const int i = std::stoi(index);
  if (!cuda_available()) throw UnsupportedError(what + " " + text + ": no CUDA device (" + no_gpu_reason() + ")");
  if (i >= static_cast<int>(cuda_devices().size()))
    throw ConfigError(what + " " + text + ": there are only " + std::to_string(cuda_devices().size()) + " GPU(s)");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(i));
}

torch::Device device_from(const po::variables_map& vm) { return parse_device(vm["device"].as<std::string>()); }

memory::BudgetSpec budget_from(const po::variables_map& vm) {
  const std::string vram = vm.count("vram") ? vm["vram"].as<std::string>() : "";
  const std::string card = vm.count("card") ? vm["card"].as<std::string>() : "";
  if (vram.empty() && card.empty()) return {};
  return memory::parse_budget(vram, card, memory::load_card_table(card_table_path()));
}

std::vector<memory::BudgetSpec> parse_budgets(const std::string& text) {
  const auto table = memory::load_card_table(card_table_path());
  std::vector<memory::BudgetSpec> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    const auto b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b == std::string::npos) continue;
    item = item.substr(b, e - b + 1);
    const bool size = std::isdigit(static_cast<unsigned char>(item[0])) || item[0] == '.';
    out.push_back(size ? memory::parse_budget(item, "", table) : memory::parse_budget("", item, table));
  }
  if (out.empty()) throw ConfigError("--budgets: give card ids or sizes, e.g. rtx3090,a40 or 24GiB,48GiB");
  return out;
}

namespace {

// --augment SET (and --no-augment, its "none"): which of the three augmentation groups run.
void apply_augment_set(const po::variables_map& vm, train::TrainOptions& o) {
  const std::string set = vm["augment"].as<std::string>();
  const bool all = set == "all", none = set == "none" || vm["no-augment"].as<bool>();
  bool mirror = all, intensity = all, spatial = all;
  std::stringstream parts(set);
  for (std::string part; !all && set != "none" && std::getline(parts, part, ',');) {
    if (part == "mirror")
      mirror = true;
    else if (part == "intensity")
      intensity = true;
    else if (part == "spatial")
      spatial = true;
    else
      throw ConfigError("--augment " + set + ": '" + part +
                        "' is not mirror, intensity or spatial (or all / none on its own)");
  }
  if (!mirror && set != "none" && !vm["flip-probability"].defaulted())
    throw ConfigError("--flip-probability with --augment " + set + ", which has no mirror");
  if (none && set != "none" && !vm["augment"].defaulted())
    throw ConfigError("--no-augment and --augment " + set + " disagree: give one");
  if (none) {
    o.loader.augment.enabled = false;
    o.step.spatial_augment.reset();
    return;
  }
  if (!mirror) o.loader.augment.flip_probability = 0;
  o.loader.augment.intensity = intensity;
  if (!spatial) o.step.spatial_augment.reset();
}

}  // namespace

void add_training_options(CommandSpec& spec) {
  po::options_description d("Data");
  d.add_options()(
      "dataset", po::value<std::string>()->value_name("PATH"),
      "dataset.json, a dataset folder (MSD, nnU-Net v2, image/label pairs, HDF5 cases) or a prepared cache")(
      "cache", po::value<std::string>()->value_name("DIR"), "where to prepare the dataset (reused when up to date)")(
      "loader-threads", po::value<int>()->default_value(4)->value_name("N"), "patch loader worker threads")(
      "oversample", po::value<double>()->default_value(0.33)->value_name("P"),
      "share of patches centred on a foreground voxel")(
      "augment", po::value<std::string>()->default_value("all")->value_name("SET"),
      "augmentations to run: all, none, or a comma list of mirror (flips), intensity (scale, shift, gamma, "
      "noise) and spatial (rotation and zoom); e.g. mirror, the nearest to MONAI's tutorial set")(
      "no-augment", po::bool_switch(), "no augmentation: --augment none")(
      "flip-probability", po::value<double>()->default_value(0.1)->value_name("P"),
      "chance of mirroring each axis of a patch (MONAI's BTCV tutorial's 0.1; nnU-Net's 0.5)")(
      "validation-fraction", po::value<double>()->default_value(0.2)->value_name("F"),
      "cases held out for validation when the dataset declares no split and --fold is not given")(
      "fold", po::value<int>()->value_name("K"),
      "0-4: train on fold K. The split, first found: a \"validation\" list in dataset.json (MONAI's "
      "datalist; one fold), nnU-Net's splits_final.json beside dataset.json or in the dataset folder "
      "(copy it from nnUNet_preprocessed/DatasetXXX/), voxfit's own 5 folds of the cases (with --fold), "
      "a random --validation-fraction split. The run writes splits.json and records the source and "
      "fold in config.json");
  po::options_description t("Training");
  t.add_options()("precision", po::value<std::string>()->default_value("fp32")->value_name("P"),
                  "fp32, tf32, fp16 (CUDA), bf16")("optimizer", po::value<std::string>()->value_name("NAME"),
                                                   "adamw or sgd [sgd for unet3d, else adamw]")(
      "lr", po::value<double>()->value_name("LR"), "peak learning rate [adamw 1e-4, sgd 1e-2]")(
      "weight-decay", po::value<double>()->value_name("W"), "[adamw 1e-5, sgd 3e-5]")(
      "clip", po::value<double>()->value_name("NORM"), "gradient norm clipping, 0 = off [sgd 12, adamw 0]")(
      "schedule", po::value<std::string>()->default_value("auto")->value_name("S"),
      "poly, cosine, constant, or auto: poly for sgd, constant for adamw")(
      "warmup", po::value<int64_t>()->default_value(0)->value_name("STEPS"), "cosine warm-up steps")(
      "seed", po::value<uint64_t>()->default_value(0)->value_name("N"), "seeds weights, data and augmentation");
  spec.options.add(d).add(t);
}

train::TrainOptions training_options_from(const po::variables_map& vm, const std::string& model) {
  train::TrainOptions o;
  o.step.precision = train::parse_precision(vm["precision"].as<std::string>());
  const auto kind = vm.count("optimizer") ? train::parse_optimizer(vm["optimizer"].as<std::string>())
                                          : train::default_optimizer(model);
  o.step.optimizer = train::OptimizerOptions::defaults_for(kind);
  if (vm.count("lr")) o.step.optimizer.lr = vm["lr"].as<double>();
  if (vm.count("weight-decay")) o.step.optimizer.weight_decay = vm["weight-decay"].as<double>();
  if (vm.count("clip")) o.step.optimizer.clip_grad_norm = vm["clip"].as<double>();
  if (!(o.step.optimizer.lr > 0)) throw ConfigError("--lr must be > 0");
  const auto schedule = vm["schedule"].as<std::string>();
  o.schedule.kind = schedule == "auto" ? train::default_schedule(kind) : train::parse_schedule(schedule);
  o.schedule.warmup_steps = vm["warmup"].as<int64_t>();
  o.seed = vm["seed"].as<uint64_t>();
  o.step.seed = o.seed;
  o.loader.threads = vm["loader-threads"].as<int>();
  if (o.loader.threads < 1) throw ConfigError("--loader-threads must be >= 1");
  o.loader.oversample_foreground = vm["oversample"].as<double>();
  if (o.loader.oversample_foreground < 0 || o.loader.oversample_foreground > 1)
    throw ConfigError("--oversample must be in [0, 1]");
  o.loader.augment.flip_probability = vm["flip-probability"].as<double>();
  if (!(o.loader.augment.flip_probability >= 0 && o.loader.augment.flip_probability <= 1))
    throw ConfigError("--flip-probability must be in [0, 1]");
  apply_augment_set(vm, o);
  o.validation_fraction = vm["validation-fraction"].as<double>();
  if (vm.count("fold")) {
    o.fold = vm["fold"].as<int>();
    if (*o.fold < 0 || *o.fold >= data::kFolds)
      throw ConfigError("--fold " + std::to_string(*o.fold) + ": expected 0 to " + std::to_string(data::kFolds - 1));
  }
  o.device = device_from(vm);
  o.budget = budget_from(vm);
  if (vm.count("memory-snapshot")) o.memory_snapshot = vm["memory-snapshot"].as<std::string>();
  return o;
}

fs::path prepared_cache(const po::variables_map& vm, const fs::path& default_cache) {
  if (!vm.count("dataset")) throw ConfigError("--dataset is required");
  const fs::path dataset = vm["dataset"].as<std::string>();
  if (fs::is_directory(dataset) && fs::exists(dataset / "plan.json")) return dataset;
  const fs::path cache = vm.count("cache") ? fs::path(vm["cache"].as<std::string>()) : default_cache;
  data::PrepareOptions po;
  po.progress = [](const std::string& line) { std::cout << "prepare: " << line << "\n"; };
  const auto result = data::prepare_dataset(io::load_dataset(dataset), cache, po);
  std::cout << "cache " << cache.string() << ": " << (result.up_to_date ? "up to date" : "prepared") << " ("
            << result.plan.cases.size() << " cases, " << result.plan.num_classes() << " classes)\n";
  return cache;
}

void add_isolate_options(CommandSpec& spec) {
  spec.options.add_options()(
      "isolate", po::bool_switch(),
      "run every probe of the max-batch search in a fresh voxfit process (nothing of one probe's allocator, "
      "cuDNN state or CUDA errors reaches the next; slower by a process start per probe)");
  spec.hidden.add_options()("probe-batch", po::value<std::int64_t>())("probe-output", po::value<std::string>())(
      "probe-point", po::value<std::string>());
}

bool run_isolated_probe(const po::variables_map& vm, const std::function<nlohmann::json(std::int64_t batch)>& probe) {
  if (!vm.count("probe-batch")) return false;
  if (!vm.count("probe-output")) throw ConfigError("--probe-batch needs --probe-output FILE");
  sweep::answer_isolated_probe(vm["probe-batch"].as<std::int64_t>(), vm["probe-output"].as<std::string>(), probe);
  return true;
}

}  // namespace voxfit::cli
