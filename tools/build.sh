#!/usr/bin/env bash
# Configures (once) and builds voxfit. Sourced by test.sh and quickstart.sh; also runnable alone.
#   BUILD_DIR      build folder (default: build, or build-cuda with a CUDA LibTorch)
#   LIBTORCH       a LibTorch folder to build against instead of Debian's
#   VOXFIT_TORCH   "python": build against python3's torch (torch.utils.cmake_prefix_path)
#   VOXFIT_CMAKE_ARGS  extra arguments for the configure step (e.g. -DVOXFIT_SANITIZE=ON)
#   VOXFIT_BUILD_TARGETS  build only these targets (default: all)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash tools/setup.sh

prefix=""
if [ -n "${LIBTORCH:-}" ]; then
  prefix="$LIBTORCH"
elif [ "${VOXFIT_TORCH:-debian}" = python ]; then
  prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
fi
if [ -f .devdeps/env ]; then
  # shellcheck disable=SC1091
  source .devdeps/env
fi
default_dir=build
[ -n "$prefix" ] && default_dir=build-cuda
BUILD_DIR=${BUILD_DIR:-$default_dir}
export BUILD_DIR

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  args=(-S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release)
  [ -n "$prefix" ] && args+=("-DCMAKE_PREFIX_PATH=$prefix${CMAKE_PREFIX_PATH:+;$CMAKE_PREFIX_PATH}")
  # shellcheck disable=SC2206
  args+=(${VOXFIT_CMAKE_ARGS:-})
  cmake "${args[@]}"
fi
# shellcheck disable=SC2086
cmake --build "$BUILD_DIR" -j"${VOXFIT_JOBS:-$(nproc)}" ${VOXFIT_BUILD_TARGETS:+--target $VOXFIT_BUILD_TARGETS}
