#!/usr/bin/env bash
# Compiles voxfit's CUDA code on a machine that has nvcc but no GPU (CI's): the kernels module
# (src/kernels/*.cu with nvcc for sm_80 and sm_90, *_cuda.cpp against a CUDA LibTorch) against
# the GPU machine's torch, taken from its pip wheel (only the wheel's C++ headers and libraries
# are used). Nothing runs. Without nvcc it says so and succeeds.
#   VOXFIT_CUDA_TORCH   torch version of the wheel (default 2.11.0, the GPU machine's)
#   VOXFIT_CUDA_TARGETS targets to build (default voxfit_cli: every library of voxfit, i.e. all its
#                       code; the executable does not link here, as pip's torch also needs the
#                       cuSPARSELt and NVSHMEM wheels); then the test files with CUDA-only code
#                       are compiled (not linked)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null 2>&1; then
  echo "cuda-compile-check: no nvcc here; skipped"
  exit 0
fi
version=${VOXFIT_CUDA_TORCH:-2.11.0}
wheel_dir=build-cuda-torch
torch_dir=$PWD/$wheel_dir/torch
start=$(date +%s)
if [ ! -f "$torch_dir/share/cmake/Torch/TorchConfig.cmake" ]; then
  rm -rf "$wheel_dir" && mkdir -p "$wheel_dir"
  if ! python3 -m pip download -q --no-deps "torch==$version" --index-url https://download.pytorch.org/whl/cu130 \
    -d "$wheel_dir/wheel" && ! python3 -m pip download -q --no-deps "torch==$version" -d "$wheel_dir/wheel"; then
    echo "cuda-compile-check: could not download torch $version's wheel; skipped"
    exit 0
  fi
  (cd "$wheel_dir" && unzip -q -o wheel/torch-*.whl 'torch/include/*' 'torch/lib/*' 'torch/share/*' && rm -rf wheel)
fi
# Debian's CPU LibTorch in /usr/lib would otherwise win TorchConfig's find_library for libtorch
# and libc10.
cmake -S . -B build-cuda-check -G Ninja -DCMAKE_BUILD_TYPE=Release -DVOXFIT_BUILD_TESTS=ON -DVOXFIT_UNITY_TESTS=OFF \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  -DCMAKE_PREFIX_PATH="$torch_dir/share/cmake" -DTORCH_LIBRARY="$torch_dir/lib/libtorch.so" \
  -Dc10_LIBRARY="$torch_dir/lib/libc10.so" -DCMAKE_CUDA_ARCHITECTURES="80;90" >build-cuda-check.log 2>&1 ||
  { tail -20 build-cuda-check.log; exit 1; }
# shellcheck disable=SC2086
cmake --build build-cuda-check -j"$(nproc)" --target ${VOXFIT_CUDA_TARGETS:-voxfit_cli}
# The tests' CUDA-only code (#if VOXFIT_WITH_CUDA): each such file compiled with its own command
# from compile_commands.json, not linked (a test target would first link the executable).
python3 - build-cuda-check/compile_commands.json $(grep -rl "VOXFIT_WITH_CUDA" tests --include='*.cpp') <<'PY'
import json, shlex, subprocess, sys
entries = {e["file"]: e for e in json.load(open(sys.argv[1]))}
for f in sys.argv[2:]:
    e = next(e for path, e in entries.items() if path.endswith("/" + f))
    args = shlex.split(e["command"])
    args[args.index("-o") + 1] = "/dev/null"
    print(f"cuda-compile-check: {f}", flush=True)
    subprocess.run(args, cwd=e["directory"], check=True)
PY
echo "cuda-compile-check: torch $version, nvcc $(nvcc --version | sed -nE 's/.*release ([0-9.]+).*/\1/p'): compiled in $(( $(date +%s) - start )) s"
