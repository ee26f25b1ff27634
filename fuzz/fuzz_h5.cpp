// libFuzzer target: the HDF5 volume reader (see fuzz_targets.h).
#include "fuzz_support.h"
#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  voxfit::fuzz::read_h5(voxfit::fuzz::write_input("case.h5", data, size));
  return 0;
}
