#include "voxfit/data/demo_dataset.h"

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/error.h"
#include "voxfit/io/volume_io.h"

namespace voxfit::data {

fs::path make_demo_dataset(const fs::path& mri_dir, const fs::path& out_dir, int cases) {
  // The T1 scan itself (0-255). KmeansTest_T1RawSkullStrip.nii.gz, beside it, is not an MRI but a
  // 4-valued mask that is 0 over all of labels 1-3: nothing could learn those classes from it.
  const fs::path image_file = mri_dir / "KmeansTest_T1UCharRaw.nii.gz";
  const fs::path label_file = mri_dir / "KmeansTest_T1KmeansPrelimSegmentation.nii.gz";
  for (const auto& f : {image_file, label_file})
    if (!fs::exists(f))
      throw IoError(f.string() + ": demo MRI not found (Debian package insighttoolkit5-examples, or set VOXFIT_DEMO_MRI_DIR)");
  if (cases < 1) throw ConfigError("demo dataset: expected at least one case");
  fs::create_directories(out_dir / "imagesTr");
  fs::create_directories(out_dir / "labelsTr");
  const Volume image = io::read_volume(image_file);
  const Volume label = io::read_volume(label_file);

  nlohmann::json training = nlohmann::json::array();
  for (int i = 0; i < cases; ++i) {
    const std::string id = "demo_" + std::string(i < 10 ? "00" : "0") + std::to_string(i);
    const fs::path img = out_dir / "imagesTr" / (id + ".nii.gz");
    const fs::path lbl = out_dir / "labelsTr" / (id + ".nii.gz");
    std::error_code ec;
    fs::remove(img, ec);
    fs::remove(lbl, ec);
    if (i == 0) {
      fs::create_symlink(fs::absolute(image_file), img);
      fs::create_symlink(fs::absolute(label_file), lbl);
    } else {
      Volume im = image, lb = label;
      const double gain = 1.0 + 0.05 * i;
      im.data = (image.data.to(torch::kFloat32) * gain).round();
      if (i % 2 == 1) {
        im.data = im.data.flip({2});
        lb.data = label.data.flip({2}).contiguous();
      }
      im.data = im.data.contiguous();
      io::write_volume(img, im);
      io::write_volume(lbl, lb);
    }
    training.push_back({{"image", "./imagesTr/" + id + ".nii.gz"}, {"label", "./labelsTr/" + id + ".nii.gz"}});
  }
  nlohmann::json labels = nlohmann::json::object();
  const torch::Tensor values = std::get<0>(torch::_unique(label.data.to(torch::kInt64).flatten(), true, false));
  labels["0"] = "background";
  for (std::int64_t k = 0; k < values.numel(); ++k) {
    const auto v = values[k].item<std::int64_t>();
    if (v != 0) labels[std::to_string(v)] = "tissue_" + std::to_string(v);
  }
  const nlohmann::json manifest{{"name", "DemoMRI"},
                                {"description", "Debian's ITK example T1 MRI (" + image_file.filename().string() + ") with its k-means segmentation"},
                                {"modality", {{"0", "MRI"}}},
                                {"labels", labels},
                                {"numTraining", cases},
                                {"training", training}};
  const fs::path out = out_dir / "dataset.json";
  write_file_atomic(out, manifest.dump(2) + "\n");
  return out;
}

}  // namespace voxfit::data
