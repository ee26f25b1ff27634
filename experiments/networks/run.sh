#!/usr/bin/env bash
# Issue 47 on the GPU machine, one device call: the new networks' training speed beside
# `peer_seg.py --fast` (torch.compile reduce-overhead + fused AdamW + channels-last) in the same
# call, and voxfit's exact largest batch under the card budgets. Real CT (tests/volumes), fp16.
#   NETS    "voxfit_model:peer_model:patch[:voxfit+args] ..." (default "resenc_unet:resenc:128"); the
#           fourth field, '+' for spaces, goes to voxfit's speed run only (the peer's settings); a patch
#           is cubic (128) or DxHxW (112x256x256, voxfit only: the peer builds cubic patches)
#   PHASES  default "build checks speed peers maxbatch"
#   BUDGETS the maxbatch phase's budgets (default rtx3090,a40)
#   CHECKS  the GPU tests of the checks phase, "binary:gtest_filter ..." (default the ResEnc tests)
#   MEMORY  "model:patch:batch[:args] ..." for the memory phase: `voxfit models --memory --measure`,
#           the predicted breakdown beside the measured one (not in the defaults)
#   PROFILE "model:patch[:peer[:voxfit+args]] ..." for the profile phase: where a batch-2 fp16 training
#           step's time goes, voxfit's (`cards profile`, summarised by `cards utilisation`) beside the
#           peer's (speed-vs-compile/peer-profile.py; peer `-` for none); PROFILE_BATCH (2) the batch
#   peermax (phase, not in the defaults): the peer's own exact largest batch (eager, a fresh model per
#           probe) under the same usable GiB as voxfit's budgets, with expandable segments (PEER_USABLE,
#           default "23.02,43.67": rtx3090 and a40 as measured on the H100)
#   SWEEPS  "model:patch ..." for the maxbatch phase (default: every net of NETS with a peer); each
#           sweep's results.jsonl comes back as $OUT/sweep_<model>.jsonl (for `voxfit cards fit`)
#   CURVES  "model:patch ..." for the curve phase: STEPS (500) steps from one seed, fused kernels
#           and then --kernels aten; loss every 50 steps, validation Dice every 100 (not in the defaults)
# Speed and peers run for every net first; then the max-batch sweeps share the time left.
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
  # voxfit alone: the checks phase builds its test binaries itself.
  OUT=$logs VOXFIT_BUILD_TARGETS=${VOXFIT_BUILD_TARGETS:-voxfit} bash tools/device-build.sh --no-tests || exit 1
fi
# shellcheck source=experiments/common.sh
source experiments/common.sh
if has checks; then  # the new network's tests and the sweep CLI test on the GPU machine
  stamp checks
  VOXFIT_BUILD_TARGETS="voxfit_test_models voxfit_test_sweep" BUILD_DIR=build-cuda bash tools/build.sh >"$logs/checks-build.log" 2>&1
  for t in ${CHECKS:-"models:*ResEnc*" "sweep:Sweep.CommandLineRunsAndRejectsASweepWithoutBudget"}; do
    "build-cuda/tests/voxfit_test_${t%%:*}" --gtest_filter="${t#*:}" >"$logs/checks_${t%%:*}.log" 2>&1
    echo "tests $t: exit $? ($(grep -cE '^\[       OK' "$logs/checks_${t%%:*}.log") passed)" >>"$summary"
  done
fi
# 128^3 patches need the CT at 0.7 mm (129 voxels deep).
cache=$work/cache_07mm
[ -d "$cache" ] || prepare_ct14 "$logs/prepare.log" 0.7 "$cache" || exit 1
echo "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), torch $(python3 -c 'import torch; print(torch.__version__)')" >>"$summary"

nets=(${NETS:-resenc_unet:resenc:128})
for net in "${nets[@]}"; do
  IFS=: read -r m pm patch extra <<<"$net"
  if has speed; then
    stamp "voxfit $m $patch batch 2 ${extra:-}"
    run=$work/speed_$m
    rm -rf "$run"
    # shellcheck disable=SC2086  # the extra arguments split on purpose
    "$vf" train --dataset "$cache" --model "$m" --patch "${patch//x/,}" --batch 2 --precision fp16 --optimizer adamw --lr 1e-4 \
      --deep-supervision false --steps 60 --log-every 10 --loader-threads 12 --output "$run" ${extra//+/ } \
      >"$logs/voxfit_${m}${extra//[^a-z0-9]/_}_speed.log" 2>&1 || tail -3 "$logs/voxfit_${m}${extra//[^a-z0-9]/_}_speed.log"
    echo "voxfit $m $patch^3 batch 2 ${extra//+/ }: $(grep '^trained ' "$logs/voxfit_${m}${extra//[^a-z0-9]/_}_speed.log")" >>"$summary"
  fi
  if has peers && [ "$pm" != - ]; then
    stamp "peer $pm $patch --fast"
    PYTHONPATH=$PWD/.shared-data/peers timeout 360 python3 .shared-data/peers/peer_seg.py --model "$pm" --patch "$patch" \
      --batches 2 --no-search --fast --steps 20 --warmup 5 >"$logs/peer_${pm}_fast.log" 2>&1
    echo "peer $pm $patch^3 --fast: $(grep -E '^\{' "$logs/peer_${pm}_fast.log" | tail -2 | tr '\n' ' ')" >>"$summary"
  fi
done
if has peermax; then  # the issue's bar: voxfit's largest batch >= the peer's with expandable segments
  for net in "${nets[@]}"; do
    IFS=: read -r m pm patch _ <<<"$net"
    [ "$pm" = - ] && continue
    stamp "peer $pm $patch max batch"
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONPATH=$PWD/.shared-data/peers timeout 300 \
      python3 .shared-data/peers/peer_seg.py --model "$pm" --patch "$patch" --batches 1,2 --steps 3 --warmup 2 \
      --usable "${PEER_USABLE:-23.02,43.67}" >"$logs/peer_${pm}_maxbatch.log" 2>&1
    echo "peer $pm $patch^3 max batch (expandable segments): $(grep -E '"max_batch"' "$logs/peer_${pm}_maxbatch.log" | tr '\n' ' ')" >>"$summary"
  done
fi
if has memory; then  # the prediction beside a measured step, per network and batch
  for c in ${MEMORY:-}; do
    IFS=: read -r m patch b extra <<<"$c"
    stamp "memory $m $patch batch $b ${extra:-}"
    # shellcheck disable=SC2086
    "$vf" models --model "$m" --patch "${patch//x/,}" --batch "$b" --memory --precision fp16 --measure --device cuda ${extra//+/ } \
      >"$logs/memory_${m}_b$b.log" 2>&1 || tail -3 "$logs/memory_${m}_b$b.log"
    { echo "memory $m $patch^3 batch $b ${extra//+/ }:"; grep -E "^  (activations|workspace|peak) " "$logs/memory_${m}_b$b.log"; } >>"$summary"
  done
fi
if has profile; then
  for c in ${PROFILE:-}; do
    IFS=: read -r m patch pm extra <<<"$c"
    stamp "profile $m $patch ${extra:-}"
    # shellcheck disable=SC2086  # the extra arguments split on purpose
    "$vf" cards profile --model "$m" --train --batch "${PROFILE_BATCH:-2}" --patch "${patch//x/,}" --precision fp16 ${extra//+/ } \
      --output "$logs/profile_$m.json" >"$logs/profile_$m.log" 2>&1 || tail -3 "$logs/profile_$m.log"
    { echo "profile $m $patch^3 batch ${PROFILE_BATCH:-2}:"; "$vf" cards utilisation --top 14 --profile "$logs/profile_$m.json"; } \
      >>"$summary" 2>&1
    [ "${pm:--}" = - ] && continue
    stamp "peer profile $pm $patch"
    PYTHONPATH=$PWD/.shared-data/peers timeout 300 python3 experiments/speed-vs-compile/peer-profile.py "$pm" \
      --patch "$patch" --top 14 >>"$summary" 2>"$logs/peer_profile_$pm.log" || tail -3 "$logs/peer_profile_$pm.log"
  done
fi
if has curve; then  # the same seed, fused kernels and then ATen's
  for c in ${CURVES:-}; do
    IFS=: read -r m patch <<<"$c"
    for k in fused aten; do
      stamp "curve $m $patch --kernels $k"
      rm -rf "$work/curve_${m}_$k"
      "$vf" train --dataset "$cache" --model "$m" --patch "${patch//x/,}" --batch 2 --precision fp16 --seed 1 \
        --kernels "$k" --steps "${STEPS:-500}" --log-every 50 --validate-every 100 --loader-threads 12 \
        --output "$work/curve_${m}_$k" >"$logs/curve_${m}_$k.log" 2>&1 || tail -3 "$logs/curve_${m}_$k.log"
      cp "$work/curve_${m}_$k/log.jsonl" "$logs/curve_${m}_$k.jsonl" 2>/dev/null
      echo "curve $m $patch^3 --kernels $k: $(grep '^trained ' "$logs/curve_${m}_$k.log")" >>"$summary"
    done
  done
fi
if has maxbatch; then
  sweeps=(${SWEEPS:-})
  if [ ${#sweeps[@]} -eq 0 ]; then
    for net in "${nets[@]}"; do
      IFS=: read -r m pm patch _ <<<"$net"
      [ "$pm" = - ] || sweeps+=("$m:$patch")
    done
  fi
  for i in "${!sweeps[@]}"; do
    IFS=: read -r m patch <<<"${sweeps[$i]}"
    stamp "voxfit $m $patch max batch"
    # The time left (LIMIT_S, default 590 s) shared by the sweeps left: one cut off keeps its journal,
    # and the same command on the same machine goes on from it.
    left=$(((${LIMIT_S:-590} - ($(date +%s) - start)) / (${#sweeps[@]} - i)))
    timeout "$left" "$vf" sweep --dataset "$cache" --models "$m" --patches "$patch" --precisions fp16 \
      --budgets "${BUDGETS:-rtx3090,a40}" --no-throughput-table --output "$work/sweep_$m" >"$logs/sweep_${m}.log" 2>&1 ||
      tail -3 "$logs/sweep_${m}.log"
    cp "$work/sweep_$m/results.jsonl" "$out/sweep_$m.jsonl" 2>/dev/null
    { echo; grep -E "probe batch|^$m" "$logs/sweep_${m}.log" | tail -24; } >>"$summary"
  done
fi
stamp "done"
cat "$summary"
