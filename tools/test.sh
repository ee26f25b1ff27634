#!/usr/bin/env bash
# The whole test suite: setup, configure, build (each skipped when already done), then CTest.
# Extra arguments go to ctest (e.g. -L models, -R Cli).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/build.sh
# The Python cross-checks (tests that compare with PyTorch, MONAI or nnU-Net where python3 has them)
# use the Python whose torch this build links, unless VOXFIT_PYTHON names another.
if [ -z "${VOXFIT_PYTHON:-}" ] && [ -n "${TORCH_PYTHON:-}" ]; then
  VOXFIT_PYTHON=$(cd "$(dirname "$TORCH_PYTHON")" && pwd)/$(basename "$TORCH_PYTHON")  # a venv's link, kept
  export VOXFIT_PYTHON
fi
cd "$BUILD_DIR"
jobs=${VOXFIT_TEST_JOBS:-$(nproc)}
# LibTorch gives every test process one intra-op thread per core unless OMP_NUM_THREADS says
# otherwise: 8 jobs on the 16-core GPU machine ran up to 128 threads, and a CPU test there took
# up to 17x its time on the 2-core CI machine (docs/performance-notes.md, entry 15). Share the cores.
threads=$(( $(nproc) / jobs ))
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( threads > 0 ? threads : 1 ))}
ctest --output-on-failure -j"$jobs" "$@"
