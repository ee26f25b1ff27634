#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "voxfit/cli/commands.h"
#include "voxfit/cli/options.h"
#include "voxfit/core/error.h"
#include "voxfit/core/units.h"
#include "voxfit/data/demo_dataset.h"
#include "voxfit/data/loader_bench.h"
#include "voxfit/data/preprocess.h"
#include "voxfit/io/dataset.h"
#include "voxfit/io/dataset_check.h"

namespace voxfit::cli {

namespace {

constexpr const char* kSubcommands =
    "subcommands:\n"
    "  check DATASET                 report every problem of a dataset (exit 1 if any)\n"
    "  prepare DATASET --output DIR  preprocess into an HDF5 cache (reused when inputs are unchanged)\n"
    "  bench CACHE                   patches/s of the loader per worker-thread count\n"
    "  demo OUTPUT                   an MSD dataset from Debian's demo MRI\n";

std::vector<double> parse_numbers(const std::string& text, const std::string& what) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto v = to_number(item);
    if (!v) throw ConfigError("--" + what + " '" + text + "': expected comma-separated numbers");
    out.push_back(*v);
  }
  if (out.empty()) throw ConfigError("--" + what + ": expected at least one number");
  return out;
}

void add_h5_options(CommandSpec& spec) {
  spec.options.add_options()("h5-image", po::value<std::string>()->default_value("image")->value_name("NAME"),
                             "image dataset inside HDF5 case files")(
      "h5-label", po::value<std::string>()->default_value("label")->value_name("NAME"),
      "label dataset inside HDF5 case files");
}

io::Dataset load(const po::variables_map& vm) {
  if (!vm.count("dataset")) throw ConfigError("expected a DATASET (dataset.json or folder)");
  io::DatasetOptions o;
  o.h5_names.image = vm["h5-image"].as<std::string>();
  o.h5_names.label = vm["h5-label"].as<std::string>();
  return io::load_dataset(vm["dataset"].as<std::string>(), o);
}

int data_check(const Args& args) {
  CommandSpec spec{"data check", "voxfit data check DATASET [options]",
                   "Reads every file of every case and reports all problems at once (missing, unreadable "
                   "or truncated files, non-3D images, grid mismatches, NaN/Inf, undeclared or missing "
                   "labels, channel mismatches). Exits 1 if there is any."};
  spec.options.add_options()("dataset", po::value<std::string>()->value_name("DATASET"),
                             "dataset.json or a dataset folder");
  add_h5_options(spec);
  spec.positional.add("dataset", 1);
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  const io::Dataset d = load(vm);
  const io::CheckReport r = io::check_dataset(d);
  for (const auto& p : r.problems) std::printf("%s\n", io::format_problem(p).c_str());
  if (!r.ok()) {
    std::printf("%zu problem(s) in %s (%s layout, %zu cases)\n", r.problems.size(), d.manifest.c_str(),
                io::to_string(d.layout).c_str(), r.cases);
    return 1;
  }
  std::string values;
  for (auto v : r.label_values) values += (values.empty() ? "" : " ") + std::to_string(v);
  std::printf("OK: %s (%s layout): %zu cases, %zu channel(s), label values %s\n", d.manifest.c_str(),
              io::to_string(d.layout).c_str(), r.cases, d.expected_channels(), values.c_str());
  return 0;
}

int data_prepare(const Args& args) {
  CommandSpec spec{"data prepare", "voxfit data prepare DATASET --output CACHE [options]",
                   "Preprocesses a dataset nnU-Net style (crop to non-zero, resample, CT/MRI "
                   "normalisation) into an HDF5 cache with a plan.json. Unchanged inputs reuse the cache."};
  data::PrepareOptions d;
  spec.options.add_options()("dataset", po::value<std::string>()->value_name("DATASET"),
                             "dataset.json or a dataset folder")(
      "output,o", po::value<std::string>()->value_name("CACHE"), "cache folder (created)")(
      "spacing", po::value<std::string>()->value_name("MM|D,H,W"),
      "target spacing in mm: one value, or one per axis in the order of --patch, D,H,W (z, y, x) "
      "(default: the dataset's median)")("normalisation",
                                         po::value<std::string>()->default_value("auto")->value_name("auto|ct|zscore"),
                                         "intensity normalisation (auto: CT channels ct, others zscore)")(
      "fg-samples", po::value<std::int64_t>()->default_value(d.foreground_samples_per_class)->value_name("N"),
      "foreground voxel locations kept per class and case")(
      "chunk", po::value<std::int64_t>()->default_value(d.chunk)->value_name("N"), "HDF5 chunk edge in voxels")(
      "gzip", po::value<int>()->default_value(d.gzip_level)->value_name("0-9"), "HDF5 gzip level (0: none)")(
      "seed", po::value<std::uint64_t>()->default_value(d.seed)->value_name("N"), "sampling seed")(
      "force", po::bool_switch(), "rebuild every case")("quiet,q", po::bool_switch(), "no per-case lines");
  add_h5_options(spec);
  spec.positional.add("dataset", 1);
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  if (!vm.count("output")) throw ConfigError("voxfit data prepare: --output CACHE is required");
  const io::Dataset dataset = load(vm);
  data::PrepareOptions o;
  if (vm.count("spacing")) {
    const auto s = parse_numbers(vm["spacing"].as<std::string>(), "spacing");
    if (s.size() == 1)
      o.spacing = std::array<double, 3>{s[0], s[0], s[0]};
    else if (s.size() == 3)  // given D,H,W as --patch; PrepareOptions keeps ITK's x, y, z
      o.spacing = std::array<double, 3>{s[2], s[1], s[0]};
    else
      throw ConfigError("--spacing: expected one number or three (D,H,W, the order of --patch)");
  }
  o.normalisation = data::parse_normalisation(vm["normalisation"].as<std::string>());
  o.foreground_samples_per_class = vm["fg-samples"].as<std::int64_t>();
  o.chunk = vm["chunk"].as<std::int64_t>();
  o.gzip_level = vm["gzip"].as<int>();
  o.seed = vm["seed"].as<std::uint64_t>();
  o.force = vm["force"].as<bool>();
  if (!vm["quiet"].as<bool>()) o.progress = [](const std::string& s) { std::printf("  %s\n", s.c_str()); };
  const std::string cache = vm["output"].as<std::string>();
  const data::PrepareResult r = data::prepare_dataset(dataset, cache, o);
  const data::Plan& p = r.plan;
  std::printf(
      "%s: %zu cases (%zu written, %zu reused%s), %d channel(s), %d classes, spacing %.4g x %.4g x %.4g mm "
      "(D x H x W)\n",
      cache.c_str(), p.cases.size(), r.cases_written, r.cases_reused, r.up_to_date ? ", up to date" : "", p.channels(),
      p.num_classes(), p.target_spacing[2], p.target_spacing[1], p.target_spacing[0]);
  for (int c = 0; c < p.channels(); ++c) {
    const auto& n = p.normalisation[c];
    if (n.scheme == data::Normalisation::CT)
      std::printf("  channel %d (%s): ct, clip [%.1f, %.1f], mean %.2f, std %.2f\n", c, p.channel_names[c].c_str(),
                  n.lower, n.upper, n.mean, n.std);
    else
      std::printf("  channel %d (%s): zscore per case\n", c, p.channel_names[c].c_str());
  }
  return 0;
}

int data_bench(const Args& args) {
  CommandSpec spec{"data bench", "voxfit data bench CACHE [--patch 96] [--batch 2] [--loader-threads 1,2,4,8,16]",
                   "Measures the patch loader's patches/s on a prepared cache for each loader worker-thread "
                   "count (--threads N is LibTorch's intra-op threads, as in every command)."};
  data::LoaderBenchOptions d;
  spec.options.add_options()("cache", po::value<std::string>()->value_name("CACHE"), "prepared cache folder")(
      "patch", po::value<std::string>()->default_value("96")->value_name("N|D,H,W"), "patch size in voxels")(
      "batch", po::value<std::int64_t>()->default_value(d.loader.batch_size)->value_name("B"), "batch size")(
      "loader-threads", po::value<std::string>()->default_value("1,2,4,8,16")->value_name("LIST"),
      "loader worker thread counts, one row each")(
      "seconds", po::value<double>()->default_value(d.seconds)->value_name("S"), "timed seconds per row")(
      "oversample", po::value<double>()->default_value(d.loader.oversample_foreground)->value_name("F"),
      "foreground oversampling fraction")("no-augment", po::bool_switch(), "turn off the per-patch augmentation")(
      "seed", po::value<std::uint64_t>()->default_value(0)->value_name("N"), "loader seed");
  spec.positional.add("cache", 1);
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  if (!vm.count("cache")) throw ConfigError("voxfit data bench: expected a CACHE folder");
  data::LoaderBenchOptions o;
  const auto patch = parse_numbers(vm["patch"].as<std::string>(), "patch");
  if (patch.size() != 1 && patch.size() != 3) throw ConfigError("--patch: expected N or D,H,W");
  for (int a = 0; a < 3; ++a) o.loader.patch[a] = static_cast<std::int64_t>(patch.size() == 1 ? patch[0] : patch[a]);
  o.loader.batch_size = vm["batch"].as<std::int64_t>();
  o.loader.oversample_foreground = vm["oversample"].as<double>();
  o.loader.augment.enabled = !vm["no-augment"].as<bool>();
  o.loader.seed = vm["seed"].as<std::uint64_t>();
  o.seconds = vm["seconds"].as<double>();
  o.threads.clear();
  for (double t : parse_numbers(vm["loader-threads"].as<std::string>(), "threads")) {
    if (t < 1) throw ConfigError("--threads: thread counts must be at least 1");
    o.threads.push_back(static_cast<int>(t));
  }
  const std::string cache = vm["cache"].as<std::string>();
  std::printf("loader bench: %s, patch %lldx%lldx%lld, batch %lld, %.1f s per row, augmentation %s\n", cache.c_str(),
              static_cast<long long>(o.loader.patch[0]), static_cast<long long>(o.loader.patch[1]),
              static_cast<long long>(o.loader.patch[2]), static_cast<long long>(o.loader.batch_size), o.seconds,
              o.loader.augment.enabled ? "on" : "off");
  std::printf("%8s %10s %12s %10s %12s\n", "threads", "patches", "patches/s", "MB/s", "worker busy");
  std::fflush(stdout);
  data::bench_loader(cache, o, [](const data::LoaderBenchRow& r) {
    std::printf("%8d %10lld %12.1f %10.1f %11.0f%%\n", r.threads, static_cast<long long>(r.patches),
                r.patches_per_second, r.megabytes_per_second, 100.0 * r.worker_busy);
    std::fflush(stdout);
  });
  return 0;
}

int data_demo(const Args& args) {
  CommandSpec spec{"data demo", "voxfit data demo OUTPUT [--cases N] [--mri-dir DIR]",
                   "Writes a small MSD-layout dataset from Debian's demo MRI (insighttoolkit5-examples) "
                   "for the quickstart."};
  const char* env = std::getenv("VOXFIT_DEMO_MRI_DIR");
  spec.options.add_options()("output", po::value<std::string>()->value_name("OUTPUT"), "dataset folder (created)")(
      "cases", po::value<int>()->default_value(4)->value_name("N"), "cases to write")(
      "mri-dir",
      po::value<std::string>()
          ->default_value(env ? env : "/usr/share/doc/insighttoolkit5-examples/examples/Data")
          ->value_name("DIR"),
      "folder with KmeansTest_T1*.nii.gz (default: $VOXFIT_DEMO_MRI_DIR or Debian's)");
  spec.positional.add("output", 1);
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  if (!vm.count("output")) throw ConfigError("voxfit data demo: expected an OUTPUT folder");
  const auto manifest =
      data::make_demo_dataset(vm["mri-dir"].as<std::string>(), vm["output"].as<std::string>(), vm["cases"].as<int>());
  std::printf("%s\n", manifest.c_str());
  return 0;
}

}  // namespace

int cmd_data(const Args& args) {
  if (!args.empty() && args[0] == "check") return data_check(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "prepare") return data_prepare(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "bench") return data_bench(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "demo") return data_demo(Args(args.begin() + 1, args.end()));
  CommandSpec spec{"data", "voxfit data <check|prepare|bench|demo> [options]",
                   std::string("Datasets: validation, the preprocessed HDF5 cache, the loader benchmark.\n\n") +
                       kSubcommands + "\n'voxfit data SUBCOMMAND --help' lists a subcommand's options."};
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  throw ConfigError(args.empty()
                        ? "voxfit data: expected a subcommand: check, prepare, bench or demo"
                        : "voxfit data: unknown subcommand '" + args[0] + "' (expected check, prepare, bench or demo)");
}

}  // namespace voxfit::cli
