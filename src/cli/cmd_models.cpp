#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

#include "voxfit/cli/commands.h"
#include "voxfit/cli/model_options.h"
#include "voxfit/cli/options.h"
#include "voxfit/cli/train_options.h"
#include "voxfit/core/error.h"
#include "voxfit/core/units.h"
#include "voxfit/kernels/conv_of_concat.h"
#include "voxfit/kernels/instance_norm_act.h"
#include "voxfit/memory/breakdown_compare.h"
#include "voxfit/memory/budget.h"
#include "voxfit/models/attention.h"
#include "voxfit/models/network.h"
#include "voxfit/models/scripted.h"
#include "voxfit/train/step_memory.h"

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
  std::printf(
      "\nParameter counts are for each model's reference setting (voxfit models --model NAME "
      "for another setting).\n");
}

void describe_model(const std::string& name, const models::ModelContext& ctx, int batch) {
  const models::ModelEntry& entry = models::find_model(name);
  const models::Network net = models::make_model(name, ctx);
  const int64_t params = models::count_parameters(*net);
  std::vector<int64_t> input = {batch, ctx.in_channels};
  input.insert(input.end(), ctx.patch.begin(), ctx.patch.end());

  const auto row = [](const std::string& k, const std::string& v) { std::printf("%-15s %s\n", k.c_str(), v.c_str()); };
  row("model", name + " (" + models::to_string(entry.task) + ")");
  row("context", "in_channels=" + std::to_string(ctx.in_channels) + " classes=" + std::to_string(ctx.num_classes) +
                     " patch=" + shape_text(ctx.patch) + " attention=" + models::to_string(ctx.attention) + " (" +
                     models::to_string(models::resolve_attention(ctx.attention)) + " in this build)" + " checkpoint=" +
                     models::to_string(ctx.checkpoint) + " channels_last=" + (ctx.channels_last ? "true" : "false"));
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
  std::printf(models::is_scripted_model(name)
                  ? "(output shapes from one forward pass on zeros)\n"
                  : "(output shapes follow from the architecture; no forward pass was run)\n");
}

std::string signed_bytes(std::int64_t bytes) {
  const std::string size = format_bytes(static_cast<std::uint64_t>(std::llabs(bytes)));
  return bytes < 0 ? "-" + size : size;
}

std::string dtype_text(const memory::DtypeBytes& bytes) {
  std::string s;
  for (const auto& [dtype, n] : bytes) s += (s.empty() ? "" : ", ") + dtype + " " + format_bytes(n);
  return s.empty() ? "none" : s;
}

std::string error_text(const memory::ComponentError& row) {
  const double e = row.relative();
  if (std::isinf(e)) return "n/a";
  char text[32];
  std::snprintf(text, sizeof text, "%+.1f%%", 100.0 * e);
  return text;
}

// What `voxfit models --memory` asked for: the step's options, and where to measure (--measure).
struct MemoryRequest {
  train::StepOptions step;
  std::optional<torch::Device> measure_on;
  memory::BudgetSpec budget;
};

void print_statics(const memory::MemoryBreakdown& b) {
  std::printf("  static by dtype: parameters %s; gradients %s; optimizer state %s; buffers %s\n",
              dtype_text(b.statics.parameters).c_str(), dtype_text(b.gradients).c_str(),
              dtype_text(b.statics.optimizer_state).c_str(), dtype_text(b.statics.buffers).c_str());
}

void print_memory(const std::string& name, const models::ModelContext& ctx, int batch, const MemoryRequest& req) {
  std::vector<std::int64_t> input = {batch, ctx.in_channels};
  input.insert(input.end(), ctx.patch.begin(), ctx.patch.end());
  const models::Network net = models::make_model(name, ctx);
  // The fused kernels run on a GPU: a prediction for a card assumes them, a CPU measurement does not.
  const bool fused =
      kernels::kernel_mode() == kernels::KernelMode::kFused && (!req.measure_on || req.measure_on->is_cuda());
  const models::KernelPaths paths{fused, fused && kernels::lean_decoders()};
  std::optional<memory::MemoryBreakdown> predicted, measured;
  try {
    predicted = train::predict_step_memory(*net, input, req.step, paths);
  } catch (const UnsupportedError&) {
    // A TorchScript network has no analytic model: it is measured, or nothing is printed.
    if (!req.measure_on)
      throw UnsupportedError(name + ": no analytic memory model (the built-in networks have one); --measure " +
                             "runs training steps and prints the measured breakdown");
  }
  if (req.measure_on) {
    const memory::ScopedBudget budget(req.budget, *req.measure_on);
    measured = train::measure_step_memory(models::make_model(name, ctx), input, *req.measure_on, req.step);
  }
  if (!predicted) {
    std::printf("\nmemory of one training step: %s, %s, input %s, measured on %s: peak in %s\n",
                train::to_string(req.step.precision).c_str(), train::to_string(req.step.optimizer.kind).c_str(),
                models::shape_to_string(input).c_str(), measured->device.c_str(), measured->peak_phase.c_str());
    print_statics(*measured);
    std::printf("  %-26s %12s\n", "component", "measured");
    for (const auto& p : measured->parts) std::printf("  %-26s %12s\n", p.name.c_str(), signed_bytes(p.bytes).c_str());
    std::printf("  %-26s %12s\n", "peak", format_bytes(measured->peak_allocated).c_str());
    std::printf("(no analytic model for this network: measured only.%s)\n",
                models::is_scripted_model(name)
                    ? " Activations are charged to the top-level child modules its forward calls directly; "
                      "what it computes itself, or calls inside a branch or loop, is 'other activations'"
                    : "");
    return;
  }
  std::printf("\nmemory of one training step: %s, %s, input %s, %s kernels, peak predicted in %s\n",
              train::to_string(req.step.precision).c_str(), train::to_string(req.step.optimizer.kind).c_str(),
              models::shape_to_string(input).c_str(),
              paths.lean_decoders ? "fused (GPU), lean decoders"
              : fused             ? "fused (GPU)"
                                  : "aten",
              predicted->peak_phase.c_str());
  print_statics(*predicted);
  if (!measured) {
    std::printf("  %-26s %12s\n", "component", "predicted");
    for (const auto& p : predicted->parts) std::printf("  %-26s %12s\n", p.name.c_str(), signed_bytes(p.bytes).c_str());
    std::printf("  %-26s %12s\n", "peak", format_bytes(predicted->peak_allocated).c_str());
    std::printf("(analytic, from shapes and dtypes; --measure runs one training step beside it)\n");
    return;
  }
  std::printf("  measured on %s: peak in %s\n", measured->device.c_str(), measured->peak_phase.c_str());
  std::printf("  %-26s %12s %12s %8s\n", "component", "predicted", "measured", "error");
  for (const auto& row : memory::compare_breakdowns(*predicted, *measured))
    std::printf("  %-26s %12s %12s %8s\n", row.name.c_str(), signed_bytes(row.predicted).c_str(),
                signed_bytes(row.measured).c_str(), error_text(row).c_str());
}

void add_memory_options(CommandSpec& spec) {
  po::options_description g("Memory (with --memory)");
  g.add_options()("memory", po::bool_switch(), "print the predicted memory breakdown of one training step")(
      "precision", po::value<std::string>()->value_name("P"), "fp32, tf32, fp16, bf16 [fp32]")(
      "optimizer", po::value<std::string>()->value_name("NAME"), "adamw or sgd [sgd for unet3d, else adamw]")(
      "measure", po::bool_switch(), "also run training steps and print the measured breakdown beside it");
  spec.options.add(g);
  add_device_options(spec);
}

MemoryRequest memory_request(const po::variables_map& vm, const std::string& model) {
  for (const char* key : {"precision", "optimizer", "card", "vram"})
    if (vm.count(key) && !vm["memory"].as<bool>()) throw ConfigError(std::string("--") + key + " needs --memory");
  if (vm["measure"].as<bool>() && !vm["memory"].as<bool>()) throw ConfigError("--measure needs --memory");
  if (vm.count("memory-snapshot")) throw ConfigError("--memory-snapshot: voxfit models writes no snapshot");
  MemoryRequest req;
  if (vm.count("precision")) req.step.precision = train::parse_precision(vm["precision"].as<std::string>());
  req.step.optimizer = train::OptimizerOptions::defaults_for(
      vm.count("optimizer") ? train::parse_optimizer(vm["optimizer"].as<std::string>())
                            : train::default_optimizer(model));
  if (vm["measure"].as<bool>()) {
    req.measure_on = device_from(vm);
    train::check_precision_supported(req.step.precision, *req.measure_on);
    req.budget = budget_from(vm);
  }
  return req;
}

}  // namespace

int cmd_models(const Args& args) {
  CommandSpec spec{"models",
                   "voxfit models [--model NAME [model options] [--batch B] [--memory [--precision P] [--measure]]]",
                   "Without --model, lists the networks with their reference parameter counts. With "
                   "--model, builds that network for the given options and prints its parameter count, "
                   "output shapes (training with deep supervision, and eval) and static training memory; "
                   "with --memory, the predicted memory breakdown of a training step (per block), and with "
                   "--measure the measured one beside it."};
  add_model_options(spec);
  spec.options.add_options()("batch", po::value<int>()->default_value(1)->value_name("B"),
                             "batch size for the shapes and the memory printed");
  add_memory_options(spec);
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  if (!vm.count("model")) {
    if (vm["memory"].as<bool>()) throw ConfigError("--memory needs --model");
    list_models();
    return 0;
  }
  const int batch = vm["batch"].as<int>();
  if (batch < 1) throw ConfigError("--batch must be >= 1, got " + std::to_string(batch));
  const std::string name = vm["model"].as<std::string>();
  const models::ModelContext ctx = model_context_from(vm, name);
  const MemoryRequest req = memory_request(vm, name);
  describe_model(name, ctx, batch);
  if (vm["memory"].as<bool>()) print_memory(name, ctx, batch, req);
  return 0;
}

}  // namespace voxfit::cli
