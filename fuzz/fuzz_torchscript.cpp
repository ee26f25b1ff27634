// libFuzzer target: the TorchScript loader (see fuzz_targets.h).
#include "fuzz_support.h"
#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  voxfit::fuzz::read_torchscript(voxfit::fuzz::write_input("model.ts", data, size));
  return 0;
}
