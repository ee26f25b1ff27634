#pragma once
// Datasets the data tests build in their temp folder from the real volumes (linked, not copied).
#include "io/io_test_util.h"
#include "support/test_support.h"
#include "voxfit/io/volume_io.h"

namespace voxfit::test {

/// MSD layout, CT: the TotalSegmentator torso crop (3 mm) and the 20-slice DICOM series
/// (0.98 x 0.98 x 2 mm) with their label maps; labels undeclared (read from the files).
inline fs::path ct_msd_dataset(const fs::path& root) {
  link(totalseg_dir() / "example_ct_sm.nii.gz", root / "imagesTr" / "ct_sm.nii.gz");
  link(totalseg_dir() / "example_seg.nii.gz", root / "labelsTr" / "ct_sm.nii.gz");
  link(totalseg_dir() / "example_ct_dicom", root / "imagesTr" / "ct_dicom");
  link(totalseg_dir() / "example_seg_dicom.nii.gz", root / "labelsTr" / "ct_dicom.nii.gz");
  nlohmann::json j;
  j["name"] = "TotalSegCT";
  j["modality"]["0"] = "CT";
  j["training"] = {{{"image", "./imagesTr/ct_sm.nii.gz"}, {"label", "./labelsTr/ct_sm.nii.gz"}},
                   {{"image", "./imagesTr/ct_dicom"}, {"label", "./labelsTr/ct_dicom.nii.gz"}}};
  write_text(root / "dataset.json", j.dump(2));
  return root;
}

/// nnU-Net v2 layout, MRI: the demo's skull-strip image (a 4-valued mask of the T1, zero outside
/// the brain, which the cropping tests rely on) with the 7-class segmentation as case demo_000,
/// plus `extra` left-right mirrored copies (written as NIfTI) as demo_001, ...
inline fs::path mri_nnunet_dataset(const fs::path& root, int extra = 1) {
  const fs::path image = demo_mri_dir() / "KmeansTest_T1RawSkullStrip.nii.gz";
  const fs::path label = demo_mri_dir() / "KmeansTest_T1KmeansPrelimSegmentation.nii.gz";
  link(image, root / "imagesTr" / "demo_000_0000.nii.gz");
  link(label, root / "labelsTr" / "demo_000.nii.gz");
  Volume im = io::read_volume(image), lb = io::read_volume(label);
  im.data = im.data.flip({2}).contiguous();
  lb.data = lb.data.flip({2}).contiguous();
  for (int k = 1; k <= extra; ++k) {
    char id[16];
    std::snprintf(id, sizeof id, "demo_%03d", k);
    io::write_volume(root / "imagesTr" / (std::string(id) + "_0000.nii.gz"), im);
    io::write_volume(root / "labelsTr" / (std::string(id) + ".nii.gz"), lb);
  }
  const auto values = std::get<0>(torch::_unique(lb.data.to(torch::kInt64).flatten()));
  std::map<std::string, int> labels{{"background", 0}};
  for (std::int64_t i = 0; i < values.numel(); ++i)
    if (values[i].item<int>() != 0) labels["tissue_" + std::to_string(values[i].item<int>())] = values[i].item<int>();
  write_nnunet_manifest(root, {"T1"}, labels);
  return root;
}

}  // namespace voxfit::test
