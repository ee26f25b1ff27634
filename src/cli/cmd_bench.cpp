#include <cstdio>
#include <iostream>

#include "voxfit/bench/benchmark.h"
#include "voxfit/bench/reference_table.h"
#include "voxfit/bench/report.h"
#include "voxfit/cli/commands.h"
#include "voxfit/cli/options.h"
#include "voxfit/cli/train_options.h"
#include "voxfit/core/error.h"
#include "voxfit/core/paths.h"
#include "voxfit/core/runtime.h"
#include "voxfit/kernels/instance_norm_act.h"

namespace voxfit::cli {

namespace {

const std::string kWhere = "voxfit bench: ";

}  // namespace

int cmd_bench(const Args& args) {
  CommandSpec spec{"bench",
                   "voxfit bench --model resnet50|vit_base_patch16_224 --precision float16|bfloat16|float32 [--train] "
                   "[--device cpu|cuda|cuda:N] [options]",
                   "Runs the ResNet50 / ViT reference benchmark (the RTX 3090 / A40 protocol: batch x steps "
                   "images per iteration, iteration 0 is warm-up) and prints its one-line result, the "
                   "steady-state mean of iterations 1..N-1 and the ratio to the published cards."};
  const std::string default_reference = reference_table_path().string();
  // clang-format off
  spec.options.add_options()
    ("model", po::value<std::string>()->default_value("resnet50")->value_name("NAME"),
     "a 2D classification network of the registry: resnet50, vit_base_patch16_224")
    ("precision", po::value<std::string>()->default_value("float16")->value_name("P"),
     "float16 (pure half weights and inputs, CUDA only), bfloat16 (the same in bfloat16) or float32")
    ("train", po::bool_switch(), "time forward + backward + SGD steps instead of inference")
    ("device", po::value<std::string>()->default_value("auto")->value_name("DEV"),
     "auto (cuda:0 when a GPU is visible, else cpu), cpu, cuda, cuda:N (N alone, as the reference's device=0, too)")
    ("batch", po::value<int64_t>()->default_value(64)->value_name("N"), "images per step")
    ("steps", po::value<int64_t>()->default_value(30)->value_name("N"), "steps per iteration")
    ("iterations", po::value<int>()->default_value(5)->value_name("N"),
     "iterations (>= 2; iteration 0 includes warm-up and is left out of the mean)")
    ("input", po::value<std::string>()->default_value("random")->value_name("zeros|random"),
     "input images (the reference used zeros)")
    ("tf32", po::value<std::string>()->default_value("on")->value_name("on|off"),
     "TF32 float32 matrix products (on as in the reference's PyTorch 1.9; off is PyTorch 2.x's default)")
    ("cudnn-tf32", po::value<std::string>()->default_value("on")->value_name("on|off"),
     "TF32 float32 cuDNN convolutions (on in every PyTorch version)")
    ("cudnn-benchmark", po::value<std::string>()->default_value("on")->value_name("on|off"),
     "time cuDNN's convolution algorithms on first use")
    ("channels-last", po::value<std::string>()->default_value("auto")->implicit_value("on")
                          ->value_name("auto|on|off"),
     "channels-last weights and input (auto: on for convolutional networks on CUDA)")
    ("cuda-graph", po::value<std::string>()->default_value("on")->value_name("on|off"),
     "capture the inference step as a CUDA graph and replay it (CUDA inference only)")
    ("attention", po::value<std::string>()->default_value("auto")->value_name("auto|math|sdpa"),
     "attention kernel of transformer networks (auto: sdpa where LibTorch has it)")
    ("reference", po::value<std::string>()->default_value(default_reference)->value_name("FILE.csv"),
     "published numbers to compare with (card,model,precision,images_per_s)")
    ("json", po::value<std::string>()->value_name("FILE"), "also write the result as JSON");
  // clang-format on
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;

  bench::BenchOptions o;
  o.model = vm["model"].as<std::string>();
  o.precision = bench::parse_precision(vm["precision"].as<std::string>(), kWhere + "--precision");
  o.train = vm["train"].as<bool>();
  o.device = parse_device(vm["device"].as<std::string>());
  o.batch = vm["batch"].as<int64_t>();
  o.steps = vm["steps"].as<int64_t>();
  o.iterations = vm["iterations"].as<int>();
  o.input = bench::parse_input_fill(vm["input"].as<std::string>(), kWhere + "--input");
  o.tf32_matmul = parse_on_off(vm["tf32"].as<std::string>(), "--tf32");
  o.tf32_cudnn = parse_on_off(vm["cudnn-tf32"].as<std::string>(), "--cudnn-tf32");
  o.cudnn_benchmark = parse_on_off(vm["cudnn-benchmark"].as<std::string>(), "--cudnn-benchmark");
  o.channels_last = parse_auto_on_off(vm["channels-last"].as<std::string>(), kWhere + "--channels-last");
  o.cuda_graph = parse_on_off(vm["cuda-graph"].as<std::string>(), "--cuda-graph");
  // Folding is an inference rewrite of the fused path: on the CPU bench keeps the reference network.
  o.fold_batch_norm = kernels::kernel_mode() == kernels::KernelMode::kFused && o.device.is_cuda();
  o.attention = models::parse_attention(vm["attention"].as<std::string>(), kWhere + "--attention");
  bench::validate(o);
  const std::string reference_file = vm["reference"].as<std::string>();
  const auto table = bench::load_reference_table(reference_file);

  const models::Network net = bench::make_bench_model(o);
  std::cout << bench::namespace_text(o) << std::flush;
  const bench::BenchResult result = bench::run_benchmark(
      net, o, [](const bench::IterationTiming& it) { std::cout << " " << bench::iteration_text(it) << std::flush; });
  std::cout << "\n";
  const auto comparisons = bench::compare_with_reference(table, o.model, bench::to_string(o.precision), o.train,
                                                         result.steady_images_per_s());
  std::cout << bench::summary_text(result, comparisons) << std::flush;
  if (vm.count("json")) bench::write_result_json(vm["json"].as<std::string>(), result, comparisons, reference_file);
  return 0;
}

}  // namespace voxfit::cli
