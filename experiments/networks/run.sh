#!/usr/bin/env bash
# Issue 47 on the GPU machine, one device call: the new networks' training speed beside
# `peer_seg.py --fast` (torch.compile reduce-overhead + fused AdamW + channels-last) in the same
# call, and voxfit's exact largest batch under the card budgets. Real CT (tests/volumes), fp16.
#   NETS    "voxfit_model:peer_model:patch ..." (default "resenc_unet:resenc:128")
#   PHASES  default "build checks speed peers maxbatch"
#   BUDGETS the maxbatch phase's budgets (default rtx3090,a40)
# Like the peer, voxfit trains with AdamW 1e-4 and without deep supervision in the speed phase.
# carry: .devdeps .shared-data (the peers). Logs: $OUT/networks-logs.tar.gz; the table is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-/tmp/voxfit-networks}
logs=/tmp/networks-logs
rm -rf "$logs" && mkdir -p "$logs" "$out"
summary=$logs/summary.md
: >"$summary"
phases=" ${PHASES:-build checks speed peers maxbatch} "
has() { [[ "$phases" == *" $1 "* ]]; }
start=$(date +%s)
stamp() {
  echo "[$(($(date +%s) - start)) s] $*" | tee -a "$logs/timeline.log"
  tar -czf "$out/networks-logs.tar.gz" -C "$logs" . 2>/dev/null
}
if has build || [ ! -x build-cuda/voxfit ]; then
  stamp build
  OUT=$logs bash tools/device-build.sh --no-tests || exit 1
fi
# shellcheck source=experiments/common.sh
source experiments/common.sh
if has checks; then  # the new network's tests and the sweep CLI test on the GPU machine
  stamp checks
  VOXFIT_BUILD_TARGETS="voxfit_test_models voxfit_test_sweep" BUILD_DIR=build-cuda bash tools/build.sh >"$logs/checks-build.log" 2>&1
  for t in "models:*ResEnc*" "sweep:Sweep.CommandLineRunsAndRejectsASweepWithoutBudget"; do
    "build-cuda/tests/voxfit_test_${t%%:*}" --gtest_filter="${t#*:}" >"$logs/checks_${t%%:*}.log" 2>&1
    echo "tests $t: exit $? ($(grep -cE '^\[       OK' "$logs/checks_${t%%:*}.log") passed)" >>"$summary"
  done
fi
# 128^3 patches need the CT at 0.7 mm (129 voxels deep).
cache=$work/cache_07mm
[ -d "$cache" ] || prepare_ct14 "$logs/prepare.log" 0.7 "$cache" || exit 1
echo "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), torch $(python3 -c 'import torch; print(torch.__version__)')" >>"$summary"

for net in ${NETS:-resenc_unet:resenc:128}; do
  IFS=: read -r m pm patch <<<"$net"
  if has speed; then
    stamp "voxfit $m $patch batch 2"
    run=$work/speed_$m
    rm -rf "$run"
    "$vf" train --dataset "$cache" --model "$m" --patch "$patch" --batch 2 --precision fp16 --optimizer adamw --lr 1e-4 \
      --deep-supervision false --steps 60 --log-every 10 --loader-threads 12 --output "$run" \
      >"$logs/voxfit_${m}_speed.log" 2>&1 || tail -3 "$logs/voxfit_${m}_speed.log"
    echo "voxfit $m $patch^3 batch 2: $(grep '^trained ' "$logs/voxfit_${m}_speed.log")" >>"$summary"
  fi
  if has peers; then
    stamp "peer $pm $patch --fast"
    PYTHONPATH=$PWD/.shared-data/peers timeout 360 python3 .shared-data/peers/peer_seg.py --model "$pm" --patch "$patch" \
      --batches 2 --no-search --fast --steps 20 --warmup 5 >"$logs/peer_${pm}_fast.log" 2>&1
    echo "peer $pm $patch^3 --fast: $(grep -E '^\{' "$logs/peer_${pm}_fast.log" | tail -2 | tr '\n' ' ')" >>"$summary"
  fi
  if has maxbatch; then
    stamp "voxfit $m $patch max batch"
    # Within the call's limit (LIMIT_S, default 590 s): a sweep cut off keeps its journal and probes.
    left=$((${LIMIT_S:-590} - ($(date +%s) - start)))
    timeout "$left" "$vf" sweep --dataset "$cache" --models "$m" --patches "$patch" --precisions fp16 \
      --budgets "${BUDGETS:-rtx3090,a40}" --no-throughput-table --output "$work/sweep_$m" >"$logs/sweep_${m}.log" 2>&1 ||
      tail -3 "$logs/sweep_${m}.log"
    { echo; grep -E "probe batch|^$m" "$logs/sweep_${m}.log" | tail -24; } >>"$summary"
  fi
done
stamp "done"
cat "$summary"
