#!/usr/bin/env bash
# The whole test suite under AddressSanitizer + UBSan (the `asan` preset's settings: build-asan/,
# RelWithDebInfo, -fsanitize=address,undefined on every voxfit target and test). Configures and
# builds what is missing, then runs CTest; extra arguments go to ctest (e.g. -R Reliability).
# Writes build-asan/asan-ctest.log; the exit status is CTest's.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${VOXFIT_ASAN_BUILD_JOBS:-$(nproc)}
# tools/build.sh configures (once, against the LibTorch it builds voxfit with: the `asan` preset
# alone finds only a system LibTorch) and builds; VOXFIT_BUILD_TARGETS narrows the build.
BUILD_DIR=build-asan VOXFIT_JOBS=$jobs \
  VOXFIT_CMAKE_ARGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DVOXFIT_SANITIZE=ON -DVOXFIT_PCH=OFF ${VOXFIT_CMAKE_ARGS:-}" \
  bash tools/build.sh

# Leak checking stays on, with the libraries' process-lifetime caches suppressed by library
# (tools/lsan.supp): LibTorch's allocator and dispatcher tables, OpenMP/oneDNN thread state, ITK's
# factory registry and HDF5's global property lists are allocated once per process and never freed
# by design. A leak whose stack runs through none of those libraries still fails its test.
# UBSan stops at the first report, so undefined behaviour fails the test that hit it.
# The test binaries start `voxfit` itself (also instrumented); children inherit these options.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1:strict_init_order=1:detect_stack_use_after_return=0:${ASAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$PWD/tools/lsan.supp:print_suppressions=0:${LSAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
cd build-asan
ctest --output-on-failure -j"${VOXFIT_TEST_JOBS:-$(nproc)}" --timeout 2700 "$@" 2>&1 | tee asan-ctest.log
exit "${PIPESTATUS[0]}"
