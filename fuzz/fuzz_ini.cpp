// libFuzzer target: the .ini / option layer (see fuzz_targets.h).
#include "fuzz_support.h"
#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  voxfit::fuzz::read_ini(voxfit::fuzz::write_input("run.ini", data, size));
  return 0;
}
