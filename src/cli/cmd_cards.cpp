#include <cstdio>
#include <iostream>

#include "voxfit/bench/reference_table.h"
#include "voxfit/cards/kernel_profile.h"
#include "voxfit/cards/memory_fit.h"
#include "voxfit/cards/prediction_report.h"
#include "voxfit/cards/profiler.h"
#include "voxfit/cards/utilisation.h"
#include "voxfit/cli/commands.h"
#include "voxfit/cli/model_options.h"
#include "voxfit/cli/options.h"
#include "voxfit/cli/train_options.h"
#include "voxfit/core/error.h"
#include "voxfit/core/paths.h"
#include "voxfit/memory/card_table.h"

namespace voxfit::cli {

namespace {

namespace fs = std::filesystem;

const char* kSubcommands =
    "Subcommands:\n"
    "  list      the GPU table (data/cards.csv)\n"
    "  fit       the largest batch of each swept configuration on every card, from the sweep's memory fit\n"
    "  profile   profile one step of a network on this GPU, kernel by kernel, into a JSON file\n"
    "  predict   throughput on every card, from saved profiles or from a profile taken here\n"
    "  utilisation  a saved profile's TFLOP/s against the card's measured GEMM rate, and its kernels' traffic\n";

void add_card_table_option(CommandSpec& spec) {
  spec.options.add_options()(
      "cards", po::value<std::string>()->default_value(card_table_path().string())->value_name("FILE.csv"),
      "the GPU table");
}

void add_profile_options(CommandSpec& spec) {
  // clang-format off
  spec.options.add_options()
    ("model", po::value<std::string>()->value_name("NAME"),
     "resnet50, vit_base_patch16_224 (bench protocol) or unetr, swin_unetr, unet3d")
    ("precision", po::value<std::string>()->default_value("float16")->value_name("P"),
     "float16 / float32 (reference models); fp16, fp32, tf32, bf16 (segmentation models)")
    ("train", po::bool_switch(), "a training step instead of inference")
    ("batch", po::value<std::int64_t>()->default_value(0)->value_name("N"),
     "samples per step (0: 64 for the reference models, 2 for segmentation)")
    ("patch", po::value<std::int64_t>()->default_value(96)->value_name("N"), "cubic patch of the segmentation models")
    ("device", po::value<std::string>()->default_value("cuda")->value_name("DEV"), "cuda or cuda:N (a CUDA device)")
    ("warmup-steps", po::value<int>()->default_value(10)->value_name("N"), "untimed steps first")
    ("timed-steps", po::value<int>()->default_value(30)->value_name("N"), "steps timed without the profiler")
    ("profiled-steps", po::value<int>()->default_value(5)->value_name("N"), "steps under the profiler")
    ("attention", po::value<std::string>()->default_value("auto")->value_name("auto|math|sdpa"),
     "attention kernel of transformer networks")
    ("tf32", po::value<std::string>()->default_value("on")->value_name("on|off"),
     "TF32 float32 matrix products of the reference models (on: PyTorch 1.9's default, as the published cards ran)")
    ("channels-last", po::value<std::string>()->default_value("auto")->value_name("auto|on|off"),
     "memory layout (reference models, auto: channels-last for convolutional nets; off: NCHW, as "
     "timm's benchmark and the published cards ran; segmentation models, auto: as train chooses on CUDA, on for unet3d)")
    ("cuda-graph", po::value<std::string>()->default_value("on")->value_name("on|off"),
     "segmentation training: time the step replayed as one CUDA graph, as train runs it (the "
     "profiled steps stay eager, so kernels keep their operators)");
  // clang-format on
  po::options_description architecture("Architecture (segmentation models, as train takes them)");
  add_architecture_options(architecture);
  spec.options.add(architecture);
}

cards::ProfileOptions profile_options(const po::variables_map& vm, const std::string& where) {
  if (!vm.count("model")) throw ConfigError(where + ": --model is required");
  cards::ProfileOptions o;
  o.model = vm["model"].as<std::string>();
  o.params = architecture_params_from(vm, o.model);
  o.precision = vm["precision"].as<std::string>();
  o.train = vm["train"].as<bool>();
  o.batch = vm["batch"].as<std::int64_t>();
  const std::int64_t patch = vm["patch"].as<std::int64_t>();
  if (patch < 1) throw ConfigError(where + ": --patch must be >= 1");
  o.patch = {patch, patch, patch};
  const torch::Device device = parse_device(vm["device"].as<std::string>());
  if (!device.is_cuda())
    throw UnsupportedError(where + ": --device " + vm["device"].as<std::string>() + ": profiles need a CUDA device");
  o.device = device.index();
  o.warmup_steps = vm["warmup-steps"].as<int>();
  o.timed_steps = vm["timed-steps"].as<int>();
  o.profiled_steps = vm["profiled-steps"].as<int>();
  o.attention = models::parse_attention(vm["attention"].as<std::string>(), where + ": --attention");
  const std::string tf32 = vm["tf32"].as<std::string>();
  if (tf32 != "on" && tf32 != "off") throw ConfigError(where + ": --tf32: expected on or off, got '" + tf32 + "'");
  o.tf32_matmul = tf32 == "on";
  o.cuda_graph = parse_on_off(vm["cuda-graph"].as<std::string>(), "--cuda-graph");
  o.channels_last = parse_auto_on_off(vm["channels-last"].as<std::string>(), where + ": --channels-last");
  return o;
}

void add_saved_profile_option(CommandSpec& spec) {
  spec.options.add_options()("profile", po::value<std::vector<std::string>>()->composing()->value_name("FILE.json"),
                             "a saved profile (repeatable)");
}

std::vector<cards::KernelProfile> saved_profiles(const po::variables_map& vm) {
  std::vector<cards::KernelProfile> profiles;
  if (vm.count("profile"))
    for (const auto& f : vm["profile"].as<std::vector<std::string>>()) profiles.push_back(cards::load_profile(f));
  return profiles;
}

const memory::CardSpec* profiled_card(const cards::KernelProfile& p, const memory::CardTable& table) {
  return p.card.empty() ? nullptr : table.find(p.card);
}

std::string profile_summary(const cards::KernelProfile& p, const memory::CardTable& table) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%s on %s: %.1f samples/s, %.3f ms a step%s (kernels %.3f ms in %zu records, other %.3f ms)\n",
                p.label().c_str(), p.device_name.c_str(), p.samples_per_s(), p.wall_s_per_step * 1e3,
                p.cuda_graph ? " replayed as a CUDA graph" : "", p.kernel_s_per_step() * 1e3, p.kernels.size(),
                p.overhead_s_per_step() * 1e3);
  return buf + cards::utilisation_line(cards::utilisation(p, profiled_card(p, table), 0, 0)) + "\n";
}

int cards_list(const Args& args) {
  CommandSpec spec{"cards list", "voxfit cards list [--cards FILE.csv]", "Prints the GPU table."};
  add_card_table_option(spec);
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  const auto table = memory::load_card_table(vm["cards"].as<std::string>());
  std::printf(
      "| card | name | arch | CUDA-visible MiB | memory | GB/s | SMs | base / boost MHz | TDP W | FP32 | FP16 vector | "
      "FP16 tensor | TF32 | BF16 | L2 MB |\n"
      "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  const auto opt = [](const std::optional<double>& v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, v && *v < 1 ? "%.3f" : "%.1f", v.value_or(0.0));
    return v ? std::string(buf) : std::string("-");
  };
  const auto text = [](const std::string& s) { return s.empty() ? std::string("-") : s; };
  for (const auto& c : table.cards()) {
    const std::string base = c.base_mhz > 0 ? std::to_string(c.base_mhz) : std::string("-");
    const std::string fp16_vector = c.fp16_emulated ? std::string("none") : opt(c.fp16_vector_tflops);
    std::printf("| %s | %s | %s | %.0f | %s | %.0f | %d | %s / %d | %d | %.1f | %s | %s | %s | %s | %.1f |\n",
                c.id.c_str(), c.name.c_str(), text(c.architecture).c_str(), c.cuda_visible_mib,
                (text(c.memory_type) + (c.inband_ecc ? " (ECC in-band)" : "")).c_str(), c.bandwidth_gbs, c.sms,
                base.c_str(), c.boost_mhz, c.tdp_w, c.fp32_tflops, fp16_vector.c_str(),
                opt(c.fp16_tensor_tflops).c_str(), opt(c.tf32_tflops).c_str(), opt(c.bf16_tflops).c_str(), c.l2_mb);
  }
  return 0;
}

int cards_fit(const Args& args) {
  CommandSpec spec{"cards fit", "voxfit cards fit --results SWEEP_DIR [--output DIR] [--cards FILE.csv]",
                   "For every card and every configuration of a sweep: the largest batch predicted from the "
                   "sweep's memory fit (static + per-sample bytes against the card's CUDA-visible memory minus the "
                   "measured CUDA context), with the measured value where the sweep ran the card's own budget. "
                   "Writes cards_fit.csv and cards_fit.md."};
  // clang-format off
  spec.options.add_options()
    ("results", po::value<std::string>()->value_name("SWEEP_DIR"), "a sweep's output folder (its results.jsonl)")
    ("output", po::value<std::string>()->value_name("DIR"), "where the tables go (default: SWEEP_DIR)");
  // clang-format on
  add_card_table_option(spec);
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  if (!vm.count("results")) throw ConfigError("voxfit cards fit: --results SWEEP_DIR is required");
  const fs::path results = vm["results"].as<std::string>();
  const fs::path output = vm.count("output") ? fs::path(vm["output"].as<std::string>()) : results;
  const auto table = memory::load_card_table(vm["cards"].as<std::string>());
  const auto fits = cards::fit_cards(cards::load_sweep_results(results), table);
  cards::write_fit_tables(fits, output);
  std::cout << cards::fit_markdown(fits) << "\nWritten: " << (output / "cards_fit.csv").string() << ", "
            << (output / "cards_fit.md").string() << "\n";
  return 0;
}

int cards_profile(const Args& args) {
  CommandSpec spec{"cards profile",
                   "voxfit cards profile --model M --precision P [--train] [--batch B] --output profile.json",
                   "Profiles one step of a network on this CUDA GPU (LibTorch's Kineto profiler): every kernel with "
                   "its time, operator, FLOPs and bytes, and the wall time of a step. Needs a CUDA build and GPU."};
  add_profile_options(spec);
  spec.options.add_options()("output", po::value<std::string>()->value_name("FILE.json"), "the profile");
  add_card_table_option(spec);
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  if (!vm.count("output")) throw ConfigError("voxfit cards profile: --output FILE.json is required");
  const auto options = profile_options(vm, "voxfit cards profile");
  const auto table = memory::load_card_table(vm["cards"].as<std::string>());
  cards::KernelProfile p = cards::profile_model(options);
  for (const auto& c : table.cards())
    if (c.name == p.device_name) p.card = c.id;
  const fs::path out = vm["output"].as<std::string>();
  if (out.has_parent_path()) fs::create_directories(out.parent_path());
  cards::save_profile(out, p);
  std::cout << profile_summary(p, table) << "Written: " << out.string() << "\n";
  return 0;
}

int cards_predict(const Args& args) {
  CommandSpec spec{
      "cards predict",
      "voxfit cards predict (--profile FILE.json [--profile ...] | --model M --precision P [--train]) "
      "[--results SWEEP_DIR] [--output DIR]",
      "Predicts samples/s on every card of the table from kernel profiles (saved ones, or one taken here first): "
      "each kernel's roofline time on the card (at the rate of the unit its arithmetic runs on there, power-limited "
      "where the card's TDP cannot feed it) plus its time beyond the profiled GPU's roofline scaled by SM count x "
      "boost clock (a kernel faster than that roofline takes the card's roofline where one launch exceeds the card's "
      "smaller L2), launch and host time kept. "
      "With --results, also each card's largest batch and samples/s there. Writes predictions.csv/.md and a plot "
      "where gnuplot exists."};
  add_saved_profile_option(spec);
  // clang-format off
  spec.options.add_options()
    ("results", po::value<std::string>()->value_name("SWEEP_DIR"), "a sweep: largest batch and samples/s per card")
    ("output", po::value<std::string>()->default_value("runs/cards")->value_name("DIR"), "where the results go")
    ("reference", po::value<std::string>()->default_value(reference_table_path().string())->value_name("FILE.csv"),
     "published numbers to check the predictions against")
    ("memory-efficiency", po::value<double>()->default_value(cards::RooflineConstants{}.memory_efficiency),
     "fraction of datasheet bandwidth a framework kernel's estimated bytes move at (every card)")
    ("compute-efficiency", po::value<double>()->default_value(cards::RooflineConstants{}.compute_efficiency),
     "fraction of datasheet peak FLOP/s a large matrix product reaches (every card)")
    ("kernel-latency-us", po::value<double>()->default_value(cards::RooflineConstants{}.kernel_latency_us),
     "microseconds of every kernel launch that no card's rates change")
    ("plot", po::value<std::string>()->default_value("on")->value_name("on|off"), "draw predictions.png with gnuplot");
  // clang-format on
  add_profile_options(spec);
  add_card_table_option(spec);
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  const std::string where = "voxfit cards predict";
  const bool saved = vm.count("profile") > 0;
  if (saved == (vm.count("model") > 0))
    throw ConfigError(where + ": give either --profile FILE.json (one or more) or --model M to profile here");
  cards::RooflineConstants k;
  k.memory_efficiency = vm["memory-efficiency"].as<double>();
  k.compute_efficiency = vm["compute-efficiency"].as<double>();
  k.kernel_latency_us = vm["kernel-latency-us"].as<double>();
  if (!(k.memory_efficiency > 0 && k.memory_efficiency <= 1 && k.compute_efficiency > 0 && k.compute_efficiency <= 1))
    throw ConfigError(where + ": --memory-efficiency and --compute-efficiency must be in (0, 1]");
  if (k.kernel_latency_us < 0) throw ConfigError(where + ": --kernel-latency-us must be >= 0");
  const std::string plot = vm["plot"].as<std::string>();
  if (plot != "on" && plot != "off") throw ConfigError(where + ": --plot: expected on or off, got '" + plot + "'");
  const auto table = memory::load_card_table(vm["cards"].as<std::string>());
  const auto reference = bench::load_reference_table(vm["reference"].as<std::string>());
  const fs::path output = vm["output"].as<std::string>();

  std::vector<cards::KernelProfile> profiles = saved_profiles(vm);
  if (!saved) {
    cards::KernelProfile p = cards::profile_model(profile_options(vm, where));
    for (const auto& c : table.cards())
      if (c.name == p.device_name) p.card = c.id;
    fs::create_directories(output);
    cards::save_profile(output / "profile.json", p);
    std::cout << profile_summary(p, table);
    profiles.push_back(std::move(p));
  }
  const auto predictions = cards::predict_all(profiles, table, k);
  const auto checks = cards::check_reference(predictions, reference);
  std::vector<cards::FitThroughput> fit_tp;
  if (vm.count("results")) {
    const auto points = cards::load_sweep_results(vm["results"].as<std::string>());
    fit_tp = cards::fit_throughput(cards::fit_cards(points, table), points, predictions);
  }
  std::cout << cards::write_prediction_report(predictions, checks, fit_tp, k, output, plot == "on")
            << "\nWritten: " << (output / "predictions.md").string() << "\n";
  return 0;
}

int cards_utilisation(const Args& args) {
  CommandSpec spec{"cards utilisation", "voxfit cards utilisation --profile FILE.json [--profile ...] [--top N]",
                   "How close a profiled step comes to its card: the FLOPs the profiler counted over the step's wall "
                   "time against the card's dense GEMM rate (measured by cards profile; else --gemm-tflops; else the "
                   "datasheet peak), the kernel time, FLOP/s and estimated DRAM traffic of each operator class, and "
                   "the kernels with the most time against the card's bandwidth."};
  add_saved_profile_option(spec);
  // clang-format off
  spec.options.add_options()
    ("top", po::value<int>()->default_value(10)->value_name("N"), "kernels listed")
    ("gemm-tflops", po::value<double>()->default_value(0)->value_name("X"),
     "the rate to hold a profile against where it has no measured GEMM rate (0: the datasheet peak)");
  // clang-format on
  add_card_table_option(spec);
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  const std::string where = "voxfit cards utilisation";
  if (!vm.count("profile")) throw ConfigError(where + ": --profile FILE.json is required");
  const int top = vm["top"].as<int>();
  if (top < 0) throw ConfigError(where + ": --top must be >= 0, got " + std::to_string(top));
  const double gemm = vm["gemm-tflops"].as<double>();
  if (!(gemm >= 0)) throw ConfigError(where + ": --gemm-tflops must be >= 0");
  const auto table = memory::load_card_table(vm["cards"].as<std::string>());
  for (const auto& p : saved_profiles(vm))
    std::cout << cards::utilisation_markdown(cards::utilisation(p, profiled_card(p, table), gemm, top)) << "\n";
  return 0;
}

}  // namespace

int cmd_cards(const Args& args) {
  if (!args.empty() && args[0] == "list") return cards_list(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "fit") return cards_fit(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "profile") return cards_profile(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "predict") return cards_predict(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "utilisation") return cards_utilisation(Args(args.begin() + 1, args.end()));
  CommandSpec spec{
      "cards", "voxfit cards <list|fit|profile|predict|utilisation> [options]",
      std::string("GPU cards: the table, the largest batch on each, throughput predicted from a profile.\n\n") +
          kSubcommands + "\n'voxfit cards SUBCOMMAND --help' lists a subcommand's options."};
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  throw ConfigError(args.empty() ? "voxfit cards: expected a subcommand: list, fit, profile, predict or utilisation"
                                 : "voxfit cards: unknown subcommand '" + args[0] +
                                       "' (expected list, fit, profile, predict or utilisation)");
}

}  // namespace voxfit::cli
