#!/usr/bin/env bash
# On the GPU machine (issue 26), one device call: build (tools/device-build.sh --no-tests) unless
# build-cuda/voxfit exists, the kernel tests, the aten / fused training-throughput matrix
# (tools/h200-kernels.sh), and kernel profiles of the fused training steps and the reference
# inference (`voxfit cards profile`, summarised by tools/profile-summary.py). Everything goes to
# $OUT/issue26.tar.gz, the tables to $OUT/summary.md (printed last).
#   PHASES  default "build tests kernels profile"; also "peers" (MONAI + torch.compile, timm)
#   PROFILES default "unetr_b2 swin_unetr_b2 unet3d_b2 resnet50_f16"
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-/tmp/voxfit-issue26}
logs=/tmp/issue26-logs
rm -rf "$logs" && mkdir -p "$logs" "$out"
summary="$out/summary.md"
: >"$summary"
phases=" ${PHASES:-build tests kernels profile} "
has() { [[ "$phases" == *" $1 "* ]]; }
start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - start )) s] $*" | tee -a "$logs/timeline.log"; }

if has build || [ ! -x build-cuda/voxfit ]; then
  stamp build
  OUT=$logs bash tools/device-build.sh --no-tests || { cp "$logs/build.log" "$out/"; exit 1; }
fi
# shellcheck source=tools/h200-common.sh
source tools/h200-common.sh
[ -d "$work/cache" ] || prepare_ct14 "$logs/prepare.log" || exit 1

if has tests; then
  stamp tests
  build-cuda/tests/voxfit_test_kernels >"$logs/kernel_tests.log" 2>&1
  { echo "## kernel tests: exit $?"; grep -E "^\[  PASSED|^\[  FAILED|SKIPPED \]" "$logs/kernel_tests.log" | head -30
    grep -B2 -A6 "Failure" "$logs/kernel_tests.log" | head -60; } >>"$summary"
fi

if has kernels; then
  stamp kernels
  for spec in "unetr|1 2 4|aten fused" "swin_unetr|1 2 4|aten fused" "unet3d|2|aten fused fused-cl"; do
    IFS='|' read -r m b v <<<"$spec"
    OUT=$logs/k_$m MODELS=$m BATCHES=$b VARIANTS=$v TESTS=0 bash tools/h200-kernels.sh >/dev/null 2>&1
    { echo; echo "## throughput $m"; cat "$logs/k_$m/kernels.md"; } >>"$summary"
  done
fi

if has profile; then
  stamp profile
  for p in ${PROFILES:-unetr_b2 swin_unetr_b2 unet3d_b2 resnet50_f16}; do
    case $p in
      resnet50_f16) args=(--model resnet50 --precision float16 --batch 64) ;;
      *) args=(--model "${p%_b*}" --precision fp16 --train --batch "${p##*_b}" --patch 96 --warmup-steps 5
               --timed-steps 10 --profiled-steps 3 --kernels "${KERNELS:-fused}") ;;
    esac
    "$vf" cards profile "${args[@]}" --output "$logs/prof_$p.json" >"$logs/prof_$p.log" 2>&1 ||
      tail -3 "$logs/prof_$p.log"
  done
  python3 tools/profile-summary.py --top 12 "$logs"/prof_*.json >"$logs/profiles.md" 2>&1
  { echo; echo "## profiles"; cat "$logs/profiles.md"; } >>"$summary"
fi

if has peers; then
  stamp peers
  export PYTHONPATH=$PWD/.shared-data/peers
  peer=.shared-data/peers
  for m in ${PEER_MODELS:-unetr}; do
    python3 "$peer/peer_seg.py" --model "$m" --batches "${PEER_BATCHES:-1,2,4}" --no-search --compile --steps 20 \
      >"$logs/peer_${m}_compile.log" 2>&1
    { echo; echo "## MONAI $m + torch.compile"; tail -8 "$logs/peer_${m}_compile.log"; } >>"$summary"
  done
fi

stamp done
tar -czf "$out/issue26.tar.gz" -C "$logs" .
cat "$summary"
