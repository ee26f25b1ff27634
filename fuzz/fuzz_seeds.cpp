// Writes the seed corpora of the fuzz targets into DIR/{manifest,nifti,h5,ini}: small valid files
// of every kind the readers take, plus a few near-misses, so fuzzing starts from real structure.
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <iostream>

#include "voxfit/io/h5_file.h"
#include "voxfit/io/volume_io.h"

namespace fs = std::filesystem;
using voxfit::PixelType;
using voxfit::Volume;

namespace {

void text(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

Volume volume(PixelType type, std::array<std::int64_t, 3> size, double spacing = 1.5) {
  Volume v;
  v.pixel_type = type;
  v.data = torch::arange(size[0] * size[1] * size[2], torch::kFloat64)
               .remainder(7)
               .view({size[2], size[1], size[0]})
               .to(voxfit::tensor_dtype(type))
               .contiguous();
  v.geometry.spacing = {spacing, 1.0, 2.0};
  v.geometry.origin = {-3.0, 4.5, 10.0};
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_seeds DIR\n";
    return 2;
  }
  const fs::path dir = argv[1];
  for (const char* d : {"manifest", "nifti", "h5", "ini"}) fs::create_directories(dir / d);

  text(dir / "manifest" / "msd.json",
       R"({"name": "x", "modality": {"0": "CT", "1": "PET"}, "labels": {"0": "background", "1": "liver"},
           "training": [{"image": "./imagesTr/a.nii.gz", "label": "./labelsTr/a.nii.gz"},
                        {"image": ["./a_0.nii.gz", "./a_1.nii.gz"], "label": "./l.nii.gz"},
                        {"image": "./dicom#1.2.3"}]})");
  text(dir / "manifest" / "nnunet.json",
       R"({"channel_names": {"0": "T1", "1": "T2"}, "labels": {"background": 0, "tumour": 1},
           "file_ending": ".nii.gz", "numTraining": 1})");
  text(dir / "manifest" / "bad.json", R"({"training": [{"label": 3}], "labels": {"x": [1, 2]}})");

  text(dir / "ini" / "train.ini",
       "threads = 1\nbatch = 2\n[train]\nmodel = unet3d\npatch = 64\nlr = 0.01\nvram = 24GiB\n"
       "resume = true\ndeep-supervision = false\nseed = 7\n[sweep]\nbatch = max\n");
  text(dir / "ini" / "bad.ini", "[train]\nbatch = \nsteps = -1\nworkers = lots\nunknown = 1\n");

  for (auto type : {PixelType::Int16, PixelType::Float32, PixelType::UInt8}) {
    const std::string n = voxfit::to_string(type);
    voxfit::io::write_volume(dir / "nifti" / (n + ".nii.gz"), volume(type, {4, 3, 2}));
    voxfit::io::write_volume(dir / "nifti" / (n + ".nii"), volume(type, {3, 2, 2}));
  }
  Volume nan = volume(PixelType::Float32, {3, 3, 1});
  nan.data[0][1][1] = std::nan("");
  nan.data[0][2][2] = INFINITY;
  voxfit::io::write_volume(dir / "nifti" / "nan.nii", nan);

  const Volume label = volume(PixelType::UInt8, {4, 3, 2});
  voxfit::io::write_h5_case(dir / "h5" / "case.h5", {volume(PixelType::Float32, {4, 3, 2})}, &label);
  voxfit::io::write_h5_case(dir / "h5" / "two.h5",
                            {volume(PixelType::Int16, {3, 2, 2}), volume(PixelType::Int16, {3, 2, 2})}, nullptr);
  {
    voxfit::io::H5Writer w(dir / "h5" / "chunked.h5");
    w.write("image", torch::ones({1, 4, 4, 4}), {{1, 2, 2, 2}, 1});
    w.write("label", torch::zeros({2, 2}, torch::kInt16));
    w.set_geometry("image", volume(PixelType::Float32, {1, 1, 1}).geometry);
    w.set_attribute("image", "pixel_type", "float32");
    w.commit();
  }
  std::cout << "seeds written to " << dir.string() << "\n";
  return 0;
}
