#pragma once
// A small MSD-layout dataset from Debian's demo MRI (insighttoolkit5-examples:
// the T1 KmeansTest_T1UCharRaw.nii.gz with its 7-class KmeansTest_T1KmeansPrelimSegmentation.nii.gz),
// so the quickstart can run `voxfit data prepare` and train without downloading anything.
#include <filesystem>

namespace voxfit::data {

namespace fs = std::filesystem;

/// Writes OUT/dataset.json plus imagesTr/ and labelsTr/: case 0 links the demo files, cases 1..n-1
/// are mirrored (left-right on odd cases) and intensity-scaled copies written as NIfTI, so a split
/// has training and validation cases. Label values are declared as found. Returns OUT/dataset.json.
/// Throws IoError naming a missing demo file.
fs::path make_demo_dataset(const fs::path& mri_dir, const fs::path& out_dir, int cases = 4);

}  // namespace voxfit::data
