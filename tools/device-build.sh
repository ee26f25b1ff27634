#!/usr/bin/env bash
# On the GPU machine: build voxfit into build-cuda/ (sm_90 only) against python3's CUDA LibTorch
# (2.x) with the carried Debian builds of ITK/HDF5/Boost/GTest/json, and run the test suite there.
# (`./tools/test.sh` alone does the same into build/, for sm_80 and sm_90.)
#   carry: .devdeps (from tools/pack-deps.sh) and .shared-data (tools/stage-device-data.sh:
#   the demo MRI; the real CT and MR volumes are the project's own, tests/volumes/)
# Logs go to $OUT when it is set.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-/tmp/voxfit-device}
mkdir -p "$out"
export VOXFIT_TORCH=python
export VOXFIT_DEMO_MRI_DIR="$PWD/.shared-data/demo"
export VOXFIT_CMAKE_ARGS="${VOXFIT_CMAKE_ARGS:-} -DCMAKE_CUDA_ARCHITECTURES=90"
export BUILD_DIR=${BUILD_DIR:-build-cuda} # the experiments' run.sh scripts read build-cuda/
start=$(date +%s)
if ! bash tools/build.sh >"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -30
  echo "device-build: BUILD FAILED (log: build.log)"
  exit 1
fi
echo "device-build: built in $(( $(date +%s) - start )) s"
# shellcheck disable=SC1091
source .devdeps/env
if [ "${1:-}" != --no-tests ]; then
  # tools/test.sh (the build is done; it gives each of the 8 jobs its share of the cores).
  VOXFIT_TEST_JOBS=8 bash tools/test.sh >"$out/ctest.log" 2>&1
  tail -4 "$out/ctest.log"
  grep -E "Failed|\*\*\*" "$out/ctest.log" | head -20
fi
