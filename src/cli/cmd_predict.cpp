#include <cstdio>
#include <filesystem>

#include "voxfit/cli/commands.h"
#include "voxfit/cli/options.h"
#include "voxfit/cli/train_options.h"
#include "voxfit/core/error.h"
#include "voxfit/io/dataset.h"
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

// A case made of nnU-Net channel files (CASE_0000.ext, ...), named without their suffix.
bool channel_files(const io::CaseFiles& c) { return c.images.size() > 1 || case_name(c.images.front()) != c.id; }

}  // namespace

int cmd_predict(const Args& args) {
  CommandSpec spec{"predict", "voxfit predict --checkpoint RUN_DIR/best.pt --input IMAGE_OR_FOLDER --output DIR",
                   "Segments images with a trained checkpoint: preprocessed like the training data (the run's "
                   "plan.json), sliding-window inference, label map resampled back onto each input's grid and "
                   "written with its geometry as DIR/<case>.nii.gz. A folder is read case by case (or as one "
                   "DICOM series): nnU-Net's channel files CASE_0000.nii.gz, CASE_0001.nii.gz, ... are the "
                   "channels of one case CASE (written as CASE.nii.gz); every other file is a case of its own."};
  spec.options.add_options()("checkpoint", po::value<std::string>()->value_name("FILE"),
                             "a checkpoint written by voxfit train")(
      "input", po::value<std::string>()->value_name("PATH"),
      "an image file, a DICOM series folder or a folder of images")(
      "output", po::value<std::string>()->value_name("DIR"), "where the label maps go")(
      "overlap", po::value<double>()->default_value(0.5)->value_name("F"), "sliding-window overlap")(
      "window-batch", po::value<int64_t>()->default_value(2)->value_name("N"), "windows per forward")(
      "device", po::value<std::string>()->default_value("auto")->value_name("DEV"), "auto, cpu, cuda, cuda:N");
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  for (const char* k : {"checkpoint", "input", "output"})
    if (!vm.count(k)) throw ConfigError(std::string("voxfit predict: --") + k + " is required");

  const fs::path input = vm["input"].as<std::string>(), out_dir = vm["output"].as<std::string>();
  if (!fs::exists(input)) throw IoError(input.string() + ": no such file or folder");
  std::vector<io::CaseFiles> cases;
  if (fs::is_directory(input) && io::list_dicom_series(input).empty()) {
    cases = io::image_folder_cases(input);
    if (cases.empty())
      throw IoError(input.string() + ": holds no image files (.nii, .nii.gz, .mha, .mhd, .nrrd, .nhdr)");
  } else {
    cases.push_back({fs::is_directory(input) ? input.filename().string() : case_name(input), {input}, std::nullopt});
  }
  train::Predictor predictor(vm["checkpoint"].as<std::string>(), parse_device(vm["device"].as<std::string>()),
                             vm["overlap"].as<double>(), vm["window-batch"].as<int64_t>());
  const int channels = predictor.plan().channels();
  for (const auto& c : cases)
    if (channel_files(c) && static_cast<int>(c.images.size()) != channels)
      throw DataError(c.images.back().string() + ": case '" + c.id + "' has " + std::to_string(c.images.size()) +
                      " channel files, the model takes " + std::to_string(channels));
  fs::create_directories(out_dir);
  for (const auto& c : cases) {
    const fs::path& f = c.images.front();
    Volume label;
    try {
      Channels image;
      for (const auto& file : c.images)
        for (auto& v : io::read_channels(file)) image.push_back(std::move(v));
      label = predictor.predict(image);
    } catch (const DataError& e) {
      throw DataError((channel_files(c) ? "case '" + c.id + "' (" + f.string() + ", ...)" : f.string()) + ": " +
                      e.what());
    }
    const fs::path out = out_dir / (c.id + ".nii.gz");
    io::write_volume(out, label);
    const std::string what =
        channel_files(c) ? c.id + " (" + std::to_string(c.images.size()) + " channel files)" : f.string();
    std::printf("%s -> %s\n", what.c_str(), out.c_str());
  }
  return 0;
}

}  // namespace voxfit::cli
