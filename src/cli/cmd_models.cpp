#include <cstdio>
#include <iostream>
#include <string>

#include "voxfit/cli/commands.h"
#include "voxfit/cli/model_options.h"
#include "voxfit/cli/options.h"
#include "voxfit/core/error.h"
#include "voxfit/core/units.h"
#include "voxfit/models/attention.h"
#include "voxfit/models/network.h"

namespace voxfit::cli {

namespace {

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

void list_models() {
  std::printf("%-22s %-18s %12s  %s\n", "model", "task", "parameters", "summary");
  for (const auto& e : models::registry())
    std::printf("%-22s %-18s %12s  %s\n", e.name.c_str(), models::to_string(e.task).c_str(),
                with_commas(e.reference_parameters).c_str(), e.summary.c_str());
  std::printf("\nParameter counts are for each model's reference setting (voxfit models --model NAME "
              "for another setting).\n");
}

std::string patch_text(const std::vector<int64_t>& patch) {
  std::string s;
  for (size_t i = 0; i < patch.size(); ++i) s += (i ? "x" : "") + std::to_string(patch[i]);
  return s;
}

void describe_model(const std::string& name, const models::ModelContext& ctx, int batch) {
  const models::ModelEntry& entry = models::find_model(name);
  const models::Network net = models::make_model(name, ctx);
  const int64_t params = models::count_parameters(*net);
  std::vector<int64_t> input = {batch, ctx.in_channels};
  input.insert(input.end(), ctx.patch.begin(), ctx.patch.end());

  const auto row = [](const std::string& k, const std::string& v) {
    std::printf("%-15s %s\n", k.c_str(), v.c_str());
  };
  row("model", name + " (" + models::to_string(entry.task) + ")");
  row("context", "in_channels=" + std::to_string(ctx.in_channels) + " classes=" + std::to_string(ctx.num_classes) +
                     " patch=" + patch_text(ctx.patch) + " attention=" + models::to_string(ctx.attention) + " (" +
                     models::to_string(models::resolve_attention(ctx.attention)) + " in this build)" +
                     " checkpoint=" + models::to_string(ctx.checkpoint) +
                     " channels_last=" + (ctx.channels_last ? "true" : "false"));
  std::string settings;
  for (const auto& p : entry.params) {
    const auto it = ctx.params.find(p.name);
    settings += (settings.empty() ? "" : " ") + p.name + "=" + (it != ctx.params.end() ? it->second : p.default_value);
  }
  row("architecture", settings);
  row("parameters", with_commas(params));
  row("input", models::shape_to_string(input));
  net->train(true);
  const auto train_shapes = net->output_shapes(input);
  net->eval();
  const auto eval_shapes = net->output_shapes(input);
  for (size_t i = 0; i < train_shapes.size(); ++i)
    row(i == 0 ? "outputs" : "", (i == 0 ? "training: " : "          ") + models::shape_to_string(train_shapes[i]));
  for (size_t i = 0; i < eval_shapes.size(); ++i)
    row("", (i == 0 ? "eval:     " : "          ") + models::shape_to_string(eval_shapes[i]));
  const int64_t bytes = models::static_training_bytes(params);
  row("static memory", format_bytes(static_cast<std::uint64_t>(bytes)) +
                           " for training: 16 B a parameter (fp32 weights, gradients and AdamW's two "
                           "moments); activations come on top");
  std::printf("(output shapes follow from the architecture; no forward pass was run)\n");
}

}  // namespace

int cmd_models(const Args& args) {
  CommandSpec spec{"models", "voxfit models [--model NAME [model options] [--batch B]]",
                   "Without --model, lists the networks with their reference parameter counts. With "
                   "--model, builds that network for the given options and prints its parameter count, "
                   "output shapes (training with deep supervision, and eval) and static training memory."};
  add_model_options(spec);
  spec.options.add_options()("batch", po::value<int>()->default_value(1)->value_name("B"),
                             "batch size for the shapes printed");
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  if (!vm.count("model")) {
    list_models();
    return 0;
  }
  const int batch = vm["batch"].as<int>();
  if (batch < 1) throw ConfigError("--batch must be >= 1, got " + std::to_string(batch));
  const std::string name = vm["model"].as<std::string>();
  describe_model(name, model_context_from(vm, name), batch);
  return 0;
}

}  // namespace voxfit::cli
