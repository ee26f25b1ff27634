// libFuzzer target: the NIfTI path through voxfit's reader (see fuzz_targets.h). An input that
// starts with the gzip magic is a .nii.gz file, anything else a .nii file.
#include "fuzz_support.h"
#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const bool gz = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  voxfit::fuzz::read_nifti(voxfit::fuzz::write_input(gz ? "input.nii.gz" : "input.nii", data, size));
  return 0;
}
