// libFuzzer target: the dataset-manifest parser (see fuzz_targets.h).
#include "fuzz_support.h"
#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  voxfit::fuzz::read_manifest(voxfit::fuzz::write_input("dataset.json", data, size));
  return 0;
}
