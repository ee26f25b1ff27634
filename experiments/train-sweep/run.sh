#!/usr/bin/env bash
# On the GPU machine, after `bash tools/device-build.sh --no-tests` (build-cuda/) and with
# .shared-data carried: the training and max-batch measurements of issues 5, 6 and 8.
#   1. a 14-class dataset from the real TotalSegmentator CT (experiments/make-ct14-dataset.py), prepared
#      at 1.5 mm;
#   2. `voxfit train` of unetr, swin_unetr and unet3d at batch 2, 96^3, fp16 (samples/s, peak
#      memory, validation Dice), unet3d in fp32 / tf32 / bf16 too, and `voxfit predict`;
#   3. `voxfit sweep --config experiments/h200_core.ini` (24 vs 48 GiB for UNETR and SwinUNETR),
#      then checkpointing and bf16 at 24 GiB.
# Logs and results go to $OUT; a short table is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-/tmp/voxfit-h200}
mkdir -p "$out"
# shellcheck source=experiments/common.sh
source experiments/common.sh
prepare_ct14 "$out/prepare.log" || exit 1

steps=${TRAIN_STEPS:-40}
for m in unetr swin_unetr unet3d; do
  "$vf" train --dataset "$work/cache" --model $m --batch 2 --precision fp16 --steps "$steps" --log-every 10 \
    --output "$work/run_$m" --loader-threads 8 >"$out/train_$m.log" 2>&1 || tail -3 "$out/train_$m.log"
done
for p in fp32 tf32 bf16; do
  "$vf" train --dataset "$work/cache" --model unet3d --batch 2 --precision $p --steps 10 --log-every 5 \
    --output "$work/run_unet3d_$p" --loader-threads 8 >"$out/train_unet3d_$p.log" 2>&1 || tail -3 "$out/train_unet3d_$p.log"
done
"$vf" predict --checkpoint "$work/run_unet3d/best.pt" --input "$ts/example_ct_sm.nii.gz" --output "$work/pred" \
  >"$out/predict.log" 2>&1 || tail -3 "$out/predict.log"

"$vf" sweep --config experiments/h200_core.ini --dataset "$work/cache" --output "$out/sweep" >"$out/sweep.log" 2>&1 ||
  tail -5 "$out/sweep.log"
"$vf" sweep --dataset "$work/cache" --models unetr,swin_unetr --patches 96 --precisions fp16 --recompute-modes blocks \
  --budgets 24GiB --output "$out/sweep" --no-throughput-table >>"$out/sweep.log" 2>&1 || tail -5 "$out/sweep.log"
"$vf" sweep --dataset "$work/cache" --models unetr,swin_unetr --patches 96 --precisions bf16 --recompute-modes blocks \
  --attention sdpa --budgets 24GiB --output "$out/sweep" --no-throughput-table >>"$out/sweep.log" 2>&1 || tail -5 "$out/sweep.log"

echo "== training, batch 2, 96^3 (issue 5) =="
for f in "$out"/train_*.log; do echo "$(basename "$f" .log): $(grep -h '^trained' "$f")"; done
grep -h -- "->" "$out/predict.log"
echo "== max batch (issue 6) =="
grep -E "^(unetr|swin_unetr|unet3d) " "$out/sweep.log"
