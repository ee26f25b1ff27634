#!/usr/bin/env bash
# The main job on an embedded default: the largest batch that trains under two memory budgets,
# and the throughput at each batch, found by training on Debian's demo MRI (a real T1 scan with
# a 7-class segmentation). Builds voxfit first if needed. Results: runs/quickstart/.
#   With a GPU: UNETR at 96^3 in fp16 under an RTX 3090's and an A40's memory (24 vs 48 GB).
#   Without:    a small 3D UNet under CPU memory budgets of 1 and 2 GiB (the same search, capped
#               by voxfit's CPU allocator).
# Then a short training run of the CPU sweep's small UNet (tools/quickstart-train.ini, about a
# minute on 2 cores) prints the mean validation Dice it reaches: the data is real and learnable.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/build.sh
vf="$BUILD_DIR/voxfit"
out=runs/quickstart
mkdir -p "$out"
"$vf" info | tee "$out/info.txt"
# A demo written before it took the T1 (its image was a 4-valued mask) is written again, and the
# training run made on it is dropped.
if ! grep -q T1UCharRaw "$out/demo/dataset.json" 2>/dev/null; then
  "$vf" data demo "$out/demo" ${VOXFIT_DEMO_MRI_DIR:+--mri-dir "$VOXFIT_DEMO_MRI_DIR"}
  rm -rf "$out/train"
fi
# shellcheck disable=SC2054
if "$vf" info | grep -q "^  cuda:0"; then
  grid=(--models unetr --patches 96 --precisions fp16 --budgets rtx3090,a40)
else
  grid=(--models unet3d --patches 32x64x64 --stages 4 --base-features 8 --max-features 64 --precisions fp32
        --budgets 1GiB,2GiB --max-batch 64)
fi
"$vf" sweep --dataset "$out/demo/dataset.json" --cache "$out/cache" "${grid[@]}" --output "$out/sweep"
# A finished run is not trained again (--resume on it only reports), an interrupted one goes on.
resume=()
[ -f "$out/train/last.pt" ] && resume=(--resume)
start=$SECONDS
"$vf" train --config tools/quickstart-train.ini --dataset "$out/demo/dataset.json" --cache "$out/cache" \
  --output "$out/train" "${resume[@]}" >"$out/train.txt"
dice=$(grep -o '"val_mean_dice":[0-9.eE+-]*' "$out/train/log.jsonl" | tail -1 | cut -d: -f2)
steps=$(sed -n 's/^steps *= *//p' tools/quickstart-train.ini)
printf 'Learnability: the small UNet reaches mean validation Dice %.3f after %s training steps (%d s; %s)\n' \
  "${dice:-nan}" "$steps" $((SECONDS - start)) "$out/train"
