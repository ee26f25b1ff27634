#include <cstdio>
#include <fstream>
#include <iostream>

#include "voxfit/cli/commands.h"
#include "voxfit/cli/model_options.h"
#include "voxfit/cli/train_options.h"
#include "voxfit/core/error.h"
#include "voxfit/core/folder_lock.h"
#include "voxfit/sweep/plan.h"
#include "voxfit/sweep/run_search.h"

namespace voxfit::cli {

int cmd_plan(const Args& args) {
  CommandSpec spec{
      "plan", "voxfit plan --dataset D --budgets rtx3090,a40 --output DIR [--model resenc_unet] [options]",
      "Plans the patch and batch per budget as nnU-Net's ResEnc planners do (a start in the shape of the median "
      "case, nnU-Net's shrink order, the network its rules build per patch), but decides every candidate by real "
      "training steps under the budget at --min-batch, then finds the exact largest batch at the chosen patch. "
      "Beside it, nnU-Net's own ResEnc M / L / XL plans for the same fingerprint, and nnU-Net's plan for each card "
      "trained under its budget. Writes DIR/plan.json, plan.md, plan.svg and nnUNetPlans_voxfit.json (one "
      "nnU-Net v2 configuration per budget)."};
  add_model_options(spec);
  add_training_options(spec);
  add_device_options(spec);
  po::options_description g("Plan");
  g.add_options()("output", po::value<std::string>()->value_name("DIR"), "where the plans go (required)")(
      "budgets", po::value<std::string>()->value_name("LIST"),
      "card ids of data/cards.csv or sizes, e.g. rtx3090,a40,a100_40gb or 24GiB [--card / --vram]")(
      "min-batch", po::value<int64_t>()->default_value(2)->value_name("B"),
      "a patch is planned only where this batch trains (nnU-Net's minimum: 2)")(
      "warmup-steps", po::value<int>()->default_value(2)->value_name("N"), "untimed training steps per probe")(
      "timed-steps", po::value<int>()->default_value(3)->value_name("N"), "timed training steps per probe (>= 1)");
  spec.options.add(g);
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  if (!vm.count("output")) throw ConfigError("voxfit plan: --output DIR is required");
  const std::string model = vm.count("model") ? vm["model"].as<std::string>() : "resenc_unet";

  train::TrainOptions t = training_options_from(vm, model);
  t.model = model;
  t.model_context = model_context_from(vm, model);
  t.step.channels_last = t.model_context.channels_last;
  t.output_dir = vm["output"].as<std::string>();
  sweep::PlanOptions o;
  o.budgets = vm.count("budgets") ? parse_budgets(vm["budgets"].as<std::string>())
                                  : std::vector<memory::BudgetSpec>{budget_from(vm)};
  if (o.budgets.front().kind == memory::BudgetKind::None)
    throw ConfigError("voxfit plan: a budget is required (--budgets rtx3090,a40, --card or --vram)");
  o.min_batch = vm["min-batch"].as<int64_t>();
  const FolderLock lock(t.output_dir);
  t.cache_dir = prepared_cache(vm, t.output_dir / "cache");
  const auto search = sweep::run_search(t, /*data_parallel=*/false);
  o.probe = search.probe;
  o.probe.warmup_steps = vm["warmup-steps"].as<int>();
  o.probe.timed_steps = vm["timed-steps"].as<int>();
  if (o.probe.warmup_steps < 0 || o.probe.timed_steps < 1)
    throw ConfigError("--warmup-steps must be >= 0 and --timed-steps >= 1");
  o.progress = [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  const auto result = sweep::run_plan(search.plan, search.index, o);
  sweep::write_plan_outputs(result, search.plan, t.output_dir);
  std::ifstream md(t.output_dir / "plan.md");
  std::cout << "\n" << md.rdbuf() << "\nplans in " << t.output_dir.string() << "/\n";
  return 0;
}

}  // namespace voxfit::cli
