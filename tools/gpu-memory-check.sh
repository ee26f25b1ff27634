#!/usr/bin/env bash
# On the GPU machine: the memory module's CUDA checks. Prints the CUDA context + cuBLAS/cuDNN
# overhead measured on this GPU, the usable bytes of an rtx3090 and an a40 budget, and runs 200
# forced CUDA OOMs that must each return allocated memory to the baseline; also writes an
# allocator snapshot (LibTorch >= 2.1).
# First: bash tools/device-build.sh --no-tests && source .devdeps/env
# Logs go to $OUT (default /tmp/voxfit-gpu-memory); the short table comes last.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/voxfit-gpu-memory}
mkdir -p "$out"
bin=${BUILD_DIR:-build-cuda}/tests/voxfit_test_memory
if [ ! -x "$bin" ]; then
  echo "gpu-memory-check: $bin not built (run: bash tools/device-build.sh --no-tests)"
  exit 1
fi
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
start=$(date +%s)
# A crash prints its stack into the log (tools/segv-backtrace.c; this machine has no gdb).
preload=""
gcc -shared -fPIC -o "$out/segv-backtrace.so" tools/segv-backtrace.c -ldl 2>/dev/null && preload="$out/segv-backtrace.so"
# Line-buffered (stdbuf): a crash must not take gtest's buffered results with it.
LD_PRELOAD=$preload stdbuf -oL -eL "$bin" --gtest_filter='CudaMemory.*' --gtest_output="json:$out/gpu-memory.json" >"$out/gpu-memory.log" 2>&1
rc=$?
if grep -q '^SIGSEGV, stack:' "$out/gpu-memory.log"; then
  echo "gpu-memory-check: the CudaMemory tests died of SIGSEGV (exit $rc); stack:"
  sed -n '/^SIGSEGV, stack:/,$p' "$out/gpu-memory.log" | (c++filt 2>/dev/null || cat) | cut -c1-200 | head -30
fi
# The whole memory suite too: the CPU-budget tests must pass in the CUDA build as well.
LD_PRELOAD=$preload stdbuf -oL -eL "$bin" --gtest_filter='-CudaMemory.*' >"$out/memory-tests.log" 2>&1
rc_cpu=$?
grep -E '^budget ' "$out/gpu-memory.log"
echo
echo "gpu-memory-check ($(( $(date +%s) - start )) s; logs in $out):"
grep '^\[voxfit-gpu\]' "$out/gpu-memory.log" | sed 's/^\[voxfit-gpu\] /  /'
printf '  %-28s %s\n' "CudaMemory tests" "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/gpu-memory.log" | tr '\n' ' ')"
printf '  %-28s %s\n' "other memory tests" "$(grep -E '^\[  (PASSED|FAILED) ' "$out/memory-tests.log" | tr '\n' ' ')"
[ $rc -eq 0 ] && [ $rc_cpu -eq 0 ]
