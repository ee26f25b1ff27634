#!/usr/bin/env bash
# Issue 48 on the GPU machine: the README's two commands exactly as a user runs them, with no
# voxfit or LibTorch variable set (the script refuses to run if one is). The machine has
# python3 with torch 2.x + CUDA and nvcc; its missing Debian packages come from the carried
# .devdeps bundle (tools/pack-deps.sh) and the demo MRI from .shared-data/demo.
#   bash experiments/workstation/run.sh test        ./tools/test.sh (builds into build/)
#   bash experiments/workstation/run.sh quickstart  ./tools/quickstart.sh
# carry: .devdeps .shared-data. Logs go to $OUT; a short summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-/tmp/voxfit-workstation}
mkdir -p "$out"
set_vars=$(env | grep -E '^(VOXFIT_[A-Z_]*|LIBTORCH|PYTORCH_CUDA_ALLOC_CONF|CMAKE_PREFIX_PATH)=' || true)
echo "workstation: CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-(unset)}, python3 $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null), $(command -v nvcc)"
if [ -n "$set_vars" ]; then
  echo "workstation: these variables are set, so this is not the no-variable run: $set_vars"
  exit 2
fi
phase=${1:?usage: run.sh test|quickstart}
start=$(date +%s)
case "$phase" in
test)
  ./tools/test.sh >"$out/test.log" 2>&1
  rc=$?
  grep -E "tests passed|tests failed|Total Test time" "$out/test.log"
  grep -E "\*\*\*Failed|\(Failed\)|Timeout|\*\*\*Exception|Not Run" "$out/test.log" | head -20
  # What ran on the GPU: the CUDA tests that did not skip.
  echo "CUDA tests passed (not skipped): $(grep -cE "Test +#[0-9]+: .*(Cuda|Gpu|Fused|Sdpa|Nccl|CudaGraph).* Passed" "$out/test.log")"
  echo "skipped: $(grep -c "Skipped" "$out/test.log")"
  ;;
quickstart)
  ./tools/quickstart.sh >"$out/quickstart.log" 2>&1
  rc=$?
  sed -n '/^voxfit /,/^devices/p' "$out/quickstart.log" | head -3
  grep -E "^  (cuda:0|no GPU used)" "$out/quickstart.log"
  grep -E "^\| (unetr|unet3d)|Learnability" "$out/quickstart.log" | head -12
  ;;
*)
  echo "usage: run.sh test|quickstart"
  exit 2
  ;;
esac
(cd "$out" && tar czf "$phase-logs.tar.gz" ./*.log 2>/dev/null)
echo "workstation $phase: exit $rc in $(($(date +%s) - start)) s ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null))"
exit "$rc"
