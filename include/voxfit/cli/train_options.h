#pragma once
// The training options shared by `voxfit train` and `voxfit sweep` (a sweep probe trains exactly
// as a run would), the device and budget options, and turning a dataset into a prepared cache.
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include "voxfit/cli/options.h"
#include "voxfit/memory/budget.h"
#include "voxfit/train/trainer.h"

namespace voxfit::cli {

/// --device, --vram, --card, --memory-snapshot.
void add_device_options(CommandSpec& spec);
/// "auto" (cuda:0 when a GPU is visible, else cpu), "cpu", "cuda", "cuda:N" or "N".
torch::Device parse_device(const std::string& text, const std::string& what = "--device");
torch::Device device_from(const po::variables_map& vm);
memory::BudgetSpec budget_from(const po::variables_map& vm);
/// --budgets "rtx3090,a40,80GiB": card ids of data/cards.csv or sizes.
std::vector<memory::BudgetSpec> parse_budgets(const std::string& text);

/// --dataset, --cache, precision/optimiser/schedule/loader/augmentation options.
void add_training_options(CommandSpec& spec);
/// TrainOptions from the options above (model context and cache excepted), defaults resolved per
/// model (SGD + clipping for unet3d as nnU-Net, AdamW for the transformers).
train::TrainOptions training_options_from(const po::variables_map& vm, const std::string& model);

/// The prepared cache for --dataset: the folder itself when it holds plan.json, else the dataset is
/// checked and prepared into --cache (default: `default_cache`), reusing an up-to-date cache.
std::filesystem::path prepared_cache(const po::variables_map& vm, const std::filesystem::path& default_cache);

/// --isolate (each probe of a max-batch search in a fresh process), and the hidden options of such
/// a process: --probe-batch B, --probe-output FILE (and --probe-point KEY for a sweep).
void add_isolate_options(CommandSpec& spec);
/// The child's side of --isolate (sweep/isolated_probe.h): true when this process is an isolated
/// probe (--probe-batch given); it then answered with `probe` into --probe-output.
bool run_isolated_probe(const po::variables_map& vm, const std::function<nlohmann::json(std::int64_t batch)>& probe);

}  // namespace voxfit::cli
