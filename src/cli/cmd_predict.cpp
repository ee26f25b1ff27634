#include <cstdio>
#include <filesystem>

#include "voxfit/cli/commands.h"
#include "voxfit/cli/options.h"
#include "voxfit/cli/train_options.h"
#include "voxfit/core/error.h"
#include "voxfit/io/volume_io.h"
#include "voxfit/train/predictor.h"

namespace voxfit::cli {

namespace fs = std::filesystem;

namespace {

// Case name of an image file: the file name without its volume extension (.nii.gz, .mha, ...).
std::string case_name(const fs::path& p) {
  const std::string name = p.filename().string();
  const std::string ext = io::volume_extension(p);
  return ext.empty() ? name : name.substr(0, name.size() - ext.size());
}

}  // namespace

int cmd_predict(const Args& args) {
  CommandSpec spec{"predict", "voxfit predict --checkpoint RUN_DIR/best.pt --input IMAGE_OR_FOLDER --output DIR",
                   "Segments images with a trained checkpoint: preprocessed like the training data (the run's "
                   "plan.json), sliding-window inference, label map resampled back onto each input's grid and "
                   "written with its geometry as DIR/<case>.nii.gz. A folder is read file by file (or as one "
                   "DICOM series)."};
  spec.options.add_options()
      ("checkpoint", po::value<std::string>()->value_name("FILE"), "a checkpoint written by voxfit train")
      ("input", po::value<std::string>()->value_name("PATH"), "an image file, a DICOM series folder or a folder of images")
      ("output", po::value<std::string>()->value_name("DIR"), "where the label maps go")
      ("overlap", po::value<double>()->default_value(0.5)->value_name("F"), "sliding-window overlap")
      ("window-batch", po::value<int64_t>()->default_value(2)->value_name("N"), "windows per forward")
      ("device", po::value<std::string>()->default_value("auto")->value_name("DEV"), "auto, cpu, cuda, cuda:N");
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  for (const char* k : {"checkpoint", "input", "output"})
    if (!vm.count(k)) throw ConfigError(std::string("voxfit predict: --") + k + " is required");

  const fs::path input = vm["input"].as<std::string>(), out_dir = vm["output"].as<std::string>();
  if (!fs::exists(input)) throw IoError(input.string() + ": no such file or folder");
  std::vector<fs::path> files;
  if (fs::is_directory(input) && io::list_dicom_series(input).empty()) {
    for (const auto& e : fs::directory_iterator(input))
      if (e.is_regular_file() && io::is_volume_file(e.path())) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    if (files.empty()) throw IoError(input.string() + ": holds no image files (.nii, .nii.gz, .mha, .mhd, .nrrd, .nhdr)");
  } else {
    files.push_back(input);
  }
  train::Predictor predictor(vm["checkpoint"].as<std::string>(), parse_device(vm["device"].as<std::string>()),
                             vm["overlap"].as<double>(), vm["window-batch"].as<int64_t>());
  fs::create_directories(out_dir);
  for (const auto& f : files) {
    Volume label;
    try {
      label = predictor.predict(io::read_channels(f));
    } catch (const DataError& e) {
      throw DataError(f.string() + ": " + e.what());
    }
    const fs::path out = out_dir / (fs::is_directory(f) ? f.filename().string() : case_name(f)) += ".nii.gz";
    io::write_volume(out, label);
    std::printf("%s -> %s\n", f.c_str(), out.c_str());
  }
  return 0;
}

}  // namespace voxfit::cli
