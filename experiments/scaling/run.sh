#!/usr/bin/env bash
# Data-parallel scaling (issue 11) on one multi-GPU host: the per-GPU max batch under a budget
# (`voxfit train --batch max --nproc 1`: the search holds the gradient buckets a rank holds), then
# samples/s of the global batch on 1, 2, 4, 8 GPUs (those the host has) at that per-GPU batch, and
# the efficiency against linear scaling: samples/s(N) / (N x samples/s(1)).
# Needs build-cuda/voxfit (or VOXFIT_BIN) and a prepared cache; writes $OUT/scaling.md and logs.
#   DATASET  a prepared cache (default: the 14-class CT of experiments/common.sh, prepared here)
#   MODELS   default "unetr swin_unetr"     BUDGET  default 24GiB (the per-GPU budget)
#   COUNTS   default "1 2 4 8"              STEPS   training steps per run (default 40)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-/tmp/voxfit-scaling}
mkdir -p "$out"
# shellcheck source=experiments/common.sh
source experiments/common.sh
dataset=${DATASET:-}
if [ -z "$dataset" ]; then
  prepare_ct14 "$out/prepare.log" || exit 1
  dataset=$work/cache
fi
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
budget=${BUDGET:-24GiB}
table="$out/scaling.md"
{
  echo "Per-GPU budget $budget, fp16, 96^3; $(nvidia-smi -L 2>/dev/null | head -1 | sed 's/ (UUID.*//') x $gpus"
  echo
  echo "| model | GPUs | batch per GPU | global batch | samples/s | efficiency vs linear |"
  echo "|---|---:|---:|---:|---:|---:|"
} >"$table"
for m in ${MODELS:-unetr swin_unetr}; do
  rm -rf "$work/scale_${m}_search"
  "$vf" train --dataset "$dataset" --model "$m" --precision fp16 --vram "$budget" --batch max --nproc 1 --steps 1 \
    --output "$work/scale_${m}_search" >"$out/search_$m.log" 2>&1 || { tail -3 "$out/search_$m.log"; continue; }
  b=$(sed -nE 's/^--batch max: ([0-9]+) fits.*/\1/p' "$out/search_$m.log")
  one=""
  for n in ${COUNTS:-1 2 4 8}; do
    [ "$n" -le "$gpus" ] || continue
    rm -rf "$work/scale_${m}_$n"
    "$vf" train --dataset "$dataset" --model "$m" --precision fp16 --batch "$b" --nproc "$n" --steps "${STEPS:-40}" \
      --log-every 10 --output "$work/scale_${m}_$n" >"$out/train_${m}_$n.log" 2>&1 || { tail -3 "$out/train_${m}_$n.log"; continue; }
    sps=$(sed -nE 's/^trained .* median ([0-9.]+) samples\/s.*/\1/p' "$out/train_${m}_$n.log")
    [ -z "$one" ] && [ "$n" = 1 ] && one=$sps
    eff=$(python3 -c "print(f'{$sps / ($n * $one):.1%}' if '$one' else '-')")
    echo "| $m | $n | $b | $((b * n)) | $sps | $eff |" >>"$table"
  done
done
cat "$table"
