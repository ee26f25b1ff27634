#!/usr/bin/env bash
# Which LibTorch voxfit builds against (sourced by setup.sh and build.sh). The first of:
#   1. LIBTORCH=/path/to/libtorch   a LibTorch you name (its share/cmake is used);
#   2. VOXFIT_TORCH=debian          Debian's libtorch-dev (1.13, CPU only; not built or tested by CI);
#   3. python3's torch, when it imports and is 2.x (pip, conda, a venv; its CUDA build when it has
#      CUDA); VOXFIT_TORCH=python insists on it;
#   4. otherwise the project's own virtual environment build-torch/venv, which setup.sh fills with
#      `pip install torch==$VOXFIT_TORCH_VERSION` (default 2.11.0, the GPU machine's; PyPI's Linux
#      wheel is the CUDA 13.0 build, which runs on a CPU too). VOXFIT_TORCH=venv insists on it.
# Sets TORCH_SOURCE (libtorch | debian | python | venv), TORCH_PREFIX (the CMake prefix, the folder
# holding Torch/TorchConfig.cmake; empty for debian), TORCH_PYTHON (the python whose torch it is, for python and venv), TORCH_DESC (one line)
# and TORCH_VENV (the project venv's folder). Returns 1 with one line on stderr when the choice
# cannot be made.
# shellcheck shell=bash disable=SC2034

TORCH_VENV=build-torch/venv
VOXFIT_TORCH_VERSION=${VOXFIT_TORCH_VERSION:-2.11.0}

# torch_info PYTHON: "VERSION CUDA CMAKE_PREFIX" of that python's torch, nothing when it has none.
torch_info() {
  "$1" - 2>/dev/null <<'PY' || true
import warnings
warnings.filterwarnings("ignore")
import torch
print(torch.__version__.split("+")[0], torch.version.cuda or "none", torch.utils.cmake_prefix_path)
PY
}

resolve_torch() {
  TORCH_SOURCE="" TORCH_PREFIX="" TORCH_PYTHON="" TORCH_DESC=""
  local mode=${VOXFIT_TORCH:-auto} info version
  if [ -n "${LIBTORCH:-}" ]; then
    if [ ! -d "$LIBTORCH/share/cmake/Torch" ]; then
      echo "setup: ERROR: LIBTORCH=$LIBTORCH has no share/cmake/Torch (not a LibTorch folder)" >&2
      return 1
    fi
    TORCH_SOURCE=libtorch TORCH_PREFIX=$LIBTORCH/share/cmake TORCH_DESC="the LibTorch in $LIBTORCH (LIBTORCH)"
    return 0
  fi
  case "$mode" in
  auto | python | venv | debian) ;;
  *)
    echo "setup: ERROR: VOXFIT_TORCH=$mode: expected python, venv or debian" >&2
    return 1
    ;;
  esac
  if [ "$mode" = debian ]; then
    TORCH_SOURCE=debian TORCH_DESC="Debian's libtorch-dev (VOXFIT_TORCH=debian)"
    return 0
  fi
  if [ "$mode" != venv ] && command -v python3 >/dev/null 2>&1; then
    info=$(torch_info python3)
    version=${info%% *}
    if [ -n "$info" ] && [ "${version%%.*}" -ge 2 ] 2>/dev/null; then
      TORCH_SOURCE=python TORCH_PYTHON=$(command -v python3) TORCH_PREFIX=${info##* }
      TORCH_DESC="python3's torch $version (CUDA $(echo "$info" | cut -d' ' -f2)), $TORCH_PYTHON"
      return 0
    fi
    if [ "$mode" = python ]; then
      echo "setup: ERROR: VOXFIT_TORCH=python, but python3 has ${version:+torch $version, not }no torch 2.x" >&2
      return 1
    fi
  fi
  TORCH_SOURCE=venv TORCH_PYTHON=$TORCH_VENV/bin/python
  TORCH_PREFIX=$PWD/$TORCH_VENV/lib/python$(venv_python_version)/site-packages/torch/share/cmake
  TORCH_DESC="torch $VOXFIT_TORCH_VERSION from PyPI in $TORCH_VENV"
}

# The python version of the project venv (or of python3, which creates it).
venv_python_version() {
  local py=python3
  [ -x "$TORCH_VENV/bin/python" ] && py=$TORCH_VENV/bin/python
  "$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")' 2>/dev/null
}

# find_nvcc: the CUDA compiler CMake will use: CUDACXX, nvcc on PATH, else the toolkit's usual
# place (/usr/local/cuda/bin/nvcc, where NVIDIA's packages put it without touching PATH). Prints
# nothing when there is none.
find_nvcc() {
  if [ -n "${CUDACXX:-}" ] && [ -x "$CUDACXX" ]; then
    echo "$CUDACXX"
  elif command -v nvcc >/dev/null 2>&1; then
    command -v nvcc
  elif [ -x /usr/local/cuda/bin/nvcc ]; then
    echo /usr/local/cuda/bin/nvcc
  fi
}

# torch_is_cuda: whether the chosen LibTorch is a CUDA build (its CMake config then needs nvcc).
torch_is_cuda() {
  case "$TORCH_SOURCE" in
  debian) return 1 ;;
  *) [ -e "$TORCH_PREFIX/../../lib/libtorch_cuda.so" ] ;;
  esac
}
