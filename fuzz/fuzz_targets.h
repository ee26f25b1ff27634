#pragma once
// What each fuzz target does with one input file, shared with the regression test that replays
// tests/reliability/corpus/ (tests/reliability/test_fuzz_corpus.cpp). Each reads the file the way
// voxfit does and swallows voxfit::Error, the one way a reader may refuse; anything else escaping
// (another exception, a crash, a sanitizer report, a broken invariant: __builtin_trap) is a finding.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "voxfit/cli/options.h"
#include "voxfit/core/error.h"
#include "voxfit/core/units.h"
#include "voxfit/io/dataset.h"
#include "voxfit/io/h5_file.h"
#include "voxfit/io/volume_io.h"
#include "voxfit/models/scripted.h"

namespace voxfit::fuzz {

/// A dataset.json (MSD or nnU-Net v2) in a folder with nothing else.
inline void read_manifest(const std::filesystem::path& manifest) {
  try {
    const io::Dataset d = io::load_dataset(manifest);
    for (const auto& c : d.cases)
      if (c.images.empty()) __builtin_trap();  // every case the parser returns names an image
  } catch (const Error&) {
  }
}

/// A .nii or .nii.gz file through voxfit's reader (ITK's NIfTI IO plus voxfit's length and NaN/Inf
/// checks); the voxels must agree with the header.
inline void read_nifti(const std::filesystem::path& file) {
  try {
    const io::ImageInfo info = io::read_image_info(file);
    for (const auto& v : io::read_channels(file))
      if (v.size() != info.size3()) __builtin_trap();
  } catch (const Error&) {
  }
}

/// An HDF5 case file read as `data check` and `data prepare` read a user's cases: survived in a
/// child process first (io::survive_h5_case), then read in this one. The patch loader's
/// hyperslab reads are not fuzzed: they read only voxfit's own cache files.
inline void read_h5(const std::filesystem::path& file) {
  try {
    io::survive_h5_case(file, io::H5Names{});
    try {
      (void)io::read_h5_channels(file, "image");
    } catch (const Error&) {
    }
    (void)io::read_h5_volume(file, "label");
  } catch (const Error&) {
  }
}

/// An .ini file given with --config to a command whose options have every kind the real commands
/// use (integers, sizes, numbers, lists, strings, switches, a positional).
inline void read_ini(const std::filesystem::path& ini) {
  namespace po = cli::po;
  cli::CommandSpec spec{"train", "voxfit train [options]", "fuzzed"};
  spec.options.add_options()("dataset", po::value<std::string>(), "")("model", po::value<std::string>(), "")(
      "batch", po::value<std::string>()->default_value("2"), "")("steps", po::value<std::int64_t>(), "")(
      "patch", po::value<std::vector<std::int64_t>>()->multitoken(), "")("lr", po::value<double>(), "")(
      "seed", po::value<std::uint64_t>(), "")("vram", po::value<std::string>(), "")(
      "workers", po::value<int>()->default_value(2), "")("resume", po::bool_switch(), "")("deep-supervision",
                                                                                          po::value<bool>(), "");
  spec.positional.add("dataset", 1);
  po::variables_map vm;
  try {
    if (cli::parse_command(spec, {"--config", ini.string()}, vm) && vm.count("vram"))
      (void)parse_bytes(vm["vram"].as<std::string>(), "--vram");
  } catch (const ConfigError&) {
  }
}

/// A TorchScript file given as --model, read as train and the other commands read one: survived in
/// a child process first, then loaded in this one (models::load_scripted), then wrapped as a
/// network (its tensors registered under their names, its forward graph instrumented). Its forward
/// is not run: that is the network's own code, not the reader's.
inline void read_torchscript(const std::filesystem::path& file) {
  try {
    torch::jit::Module module = models::load_scripted(file);
    (void)std::make_shared<models::ScriptedNetworkImpl>(std::move(module), file.string());
  } catch (const Error&) {
  }
}

}  // namespace voxfit::fuzz
