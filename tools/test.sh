#!/usr/bin/env bash
# The whole test suite: setup, configure, build (each skipped when already done), then CTest.
# Extra arguments go to ctest (e.g. -L models, -R Cli).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/build.sh
cd "$BUILD_DIR"
ctest --output-on-failure -j"${VOXFIT_TEST_JOBS:-$(nproc)}" "$@"
