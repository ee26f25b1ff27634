#!/usr/bin/env bash
# On the GPU machine (issue 26, numerics): the same training run with --kernels aten (twice: the
# run-to-run spread of cuDNN's autotuned algorithms and the loader) and --kernels fused, from one
# seed, for UNETR and UNet3D on the 14-class real CT (batch 2, 96^3, fp16, STEPS steps, validation
# by sliding window at the end). Prints per model the largest and mean gap of the per-step loss
# (fused - aten) beside the aten-aten gap, and the final validation Dice of each run.
# Needs build-cuda/voxfit and .shared-data. Logs go to $OUT; $OUT/kernels_curve.md holds the table.
#   STEPS   default 200
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-/tmp/voxfit-kernels-curve}
mkdir -p "$out"
# shellcheck source=experiments/common.sh
source experiments/common.sh
steps=${STEPS:-200}
[ -d "$work/cache" ] || prepare_ct14 "$out/prepare.log" || exit 1
for m in ${MODELS:-unetr unet3d}; do
  for run in aten aten2 fused graph; do
    case $run in graph) flags="--kernels fused --cuda-graph on" ;; *) flags="--kernels ${run%2}" ;; esac
    rm -rf "$work/curve_${m}_$run"
    "$vf" train --dataset "$work/cache" --model "$m" --batch 2 --precision fp16 --steps "$steps" --seed 0 \
      --validate-every "$steps" --log-every 1 --loader-threads 12 $flags \
      --output "$work/curve_${m}_$run" >"$out/curve_${m}_$run.log" 2>&1 || tail -2 "$out/curve_${m}_$run.log"
    cp "$work/curve_${m}_$run/log.jsonl" "$out/curve_${m}_$run.jsonl" 2>/dev/null
  done
done
python3 - "$out" ${MODELS:-unetr unet3d} <<'PY' | tee "$out/kernels_curve.md"
import json, sys
out, models = sys.argv[1], sys.argv[2:]
def read(path):
    loss, dice = {}, None
    for line in open(path):
        j = json.loads(line)
        if "val_mean_dice" in j: dice = j["val_mean_dice"]
        elif "loss" in j: loss[j["step"]] = j["loss"]
    return loss, dice
print("| model | steps | loss gap fused-aten: max / mean | fused+graph-aten: max / mean | aten-aten: max / mean | final loss aten / aten2 / fused / fused+graph | val Dice aten / aten2 / fused / fused+graph |")
print("|---|---:|---:|---:|---:|---:|---:|")
for m in models:
    try:
        (a, da), (a2, da2), (f, df), (c, dc) = (read(f"{out}/curve_{m}_{r}.jsonl") for r in ("aten", "aten2", "fused", "graph"))
    except OSError as e:
        print(f"| {m} | missing: {e} |"); continue
    steps = sorted(set(a) & set(f) & set(a2) & set(c))
    gap = lambda x, y: (max(abs(x[s] - y[s]) for s in steps), sum(abs(x[s] - y[s]) for s in steps) / len(steps))
    g, gc, g2 = gap(f, a), gap(c, a), gap(a2, a)
    last = steps[-1]
    print(f"| {m} | {len(steps)} | {g[0]:.4f} / {g[1]:.4f} | {gc[0]:.4f} / {gc[1]:.4f} | {g2[0]:.4f} / {g2[1]:.4f} | "
          f"{a[last]:.4f} / {a2[last]:.4f} / {f[last]:.4f} / {c[last]:.4f} | {da:.4f} / {da2:.4f} / {df:.4f} / {dc:.4f} |")
PY
