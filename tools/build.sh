#!/usr/bin/env bash
# Configures (once) and builds voxfit. Sourced by test.sh and quickstart.sh; also runnable alone.
# The LibTorch is tools/torch.sh's choice (LIBTORCH, python3's torch 2.x, or the project venv that
# setup.sh fills from PyPI); with a CUDA LibTorch and nvcc, voxfit's CUDA kernels are built too.
#   BUILD_DIR      build folder (default: build); configured afresh when the LibTorch changes
#   LIBTORCH, VOXFIT_TORCH, VOXFIT_TORCH_VERSION   see tools/torch.sh
#   VOXFIT_CMAKE_ARGS  extra arguments for the configure step (e.g. -DVOXFIT_SANITIZE=ON)
#   VOXFIT_BUILD_TARGETS  build only these targets (default: all)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash tools/setup.sh
# shellcheck source=tools/torch.sh
source tools/torch.sh
resolve_torch
if [ -f .devdeps/env ]; then
  # shellcheck disable=SC1091
  source .devdeps/env
fi
# Debian's demo MRI (insighttoolkit5-examples), or the copy tools/stage-device-data.sh carries to a
# machine without Debian's packages: the quickstart and the tests read it.
if [ -z "${VOXFIT_DEMO_MRI_DIR:-}" ] && [ ! -d /usr/share/doc/insighttoolkit5-examples/examples/Data ] &&
  [ -f .shared-data/demo/KmeansTest_T1UCharRaw.nii.gz ]; then
  export VOXFIT_DEMO_MRI_DIR=$PWD/.shared-data/demo
fi
BUILD_DIR=${BUILD_DIR:-build}
export BUILD_DIR
# The CUDA compiler where the toolkit is installed but not on PATH (CMake and torch's config find it).
if torch_is_cuda && nvcc_path=$(find_nvcc) && [ -n "$nvcc_path" ]; then
  CUDACXX=$nvcc_path
  PATH=$(dirname "$nvcc_path"):$PATH
  export CUDACXX PATH
fi

# A build folder configured against another LibTorch is configured afresh (its objects rebuild).
torch_dir=""
[ -n "$TORCH_PREFIX" ] && torch_dir=$(cd "$TORCH_PREFIX/Torch" && pwd -P)
if [ -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cached=$(sed -n 's/^Torch_DIR:PATH=//p' "$BUILD_DIR/CMakeCache.txt")
  [ -n "$cached" ] && cached=$(cd "$cached" 2>/dev/null && pwd -P || echo "$cached")
  stale=0
  if [ -n "$torch_dir" ]; then
    [ "$cached" = "$torch_dir" ] || stale=1
  else
    [[ "$cached" == /usr/* ]] || stale=1
  fi
  if [ "$stale" = 1 ]; then
    echo "build: $BUILD_DIR/ was configured against ${cached:-another LibTorch}; configuring it for $TORCH_DESC" >&2
    rm -rf "$BUILD_DIR/CMakeCache.txt" "$BUILD_DIR/CMakeFiles"
  fi
fi

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  args=(-S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release)
  if [ -n "$TORCH_PREFIX" ]; then
    # The chosen LibTorch's own libraries, not a system LibTorch that TorchConfig's find_library
    # might find first (Debian's libtorch-dev in /usr/lib).
    lib=$TORCH_PREFIX/../../lib
    args+=("-DCMAKE_PREFIX_PATH=$TORCH_PREFIX${CMAKE_PREFIX_PATH:+;$CMAKE_PREFIX_PATH}"
      "-DTORCH_LIBRARY=$lib/libtorch.so" "-Dc10_LIBRARY=$lib/libc10.so")
  fi
  # shellcheck disable=SC2206
  args+=(${VOXFIT_CMAKE_ARGS:-})
  cmake "${args[@]}"
fi
# shellcheck disable=SC2086
cmake --build "$BUILD_DIR" -j"${VOXFIT_JOBS:-$(nproc)}" ${VOXFIT_BUILD_TARGETS:+--target $VOXFIT_BUILD_TARGETS}
