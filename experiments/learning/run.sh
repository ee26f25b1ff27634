#!/usr/bin/env bash
# Issue 30 on the GPU machine: voxfit and MONAI train the same network on the same real 14-class CT
# for the same steps, batch (2) and patch (96^3, fp16), and both log the mean validation Dice by
# sliding window every VALIDATE_EVERY steps. voxfit: `voxfit train` with its defaults for the
# network (unetr: AdamW 1e-4; unet3d: nnU-Net's SGD 1e-2 poly, deep supervision); MONAI:
# experiments/learning/peer_learn.py (the BTCV tutorial's pipeline; UNETR, or DynUNet as nnU-Net's
# 3d_fullres). Needs build-cuda/voxfit and .shared-data (tools/stage-device-data.sh: MONAI and
# nibabel). Logs and the jsonl curves go to $OUT (packed into $OUT/learning.tar.gz); the table of
# final Dice per run is printed last. experiments/learning/plot.sh draws the curves from them.
#   MODELS          default "unetr unet3d" (MONAI's peer of unet3d is its DynUNet)
#   SEEDS           default "0"
#   STEPS           default 2000; VALIDATE_EVERY default 200
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-/tmp/voxfit-learning}
logs=/tmp/learning-logs
rm -rf "$logs" && mkdir -p "$logs" "$out"
# shellcheck source=experiments/common.sh
source experiments/common.sh
steps=${STEPS:-2000}
every=${VALIDATE_EVERY:-200}
prepare_ct14 "$logs/prepare.log" || exit 1
export PYTHONPATH=$PWD/.shared-data/peers:$PWD/.shared-data/pylib
pack() { tar -czf "$out/learning.tar.gz" -C "$logs" .; }
for m in ${MODELS:-unetr unet3d}; do
  peer=$m
  [ "$m" = unet3d ] && peer=dynunet
  for seed in ${SEEDS:-0}; do
    run="$work/learn_${m}_s$seed"
    rm -rf "$run"
    "$vf" train --dataset "$work/cache" --model "$m" --batch 2 --patch 96 --precision fp16 --steps "$steps" \
      --validate-every "$every" --log-every 50 --loader-threads 12 --seed "$seed" --output "$run" \
      >"$logs/voxfit_${m}_s$seed.log" 2>&1 || tail -3 "$logs/voxfit_${m}_s$seed.log"
    cp "$run/log.jsonl" "$logs/voxfit_${m}_s$seed.jsonl" 2>/dev/null
    pack
    python3 experiments/learning/peer_learn.py --dataset "$work/ct14/dataset.json" --model "$peer" --steps "$steps" \
      --validate-every "$every" --seed "$seed" --workers 8 --output "$logs/monai_${m}_s$seed.jsonl" \
      >"$logs/monai_${m}_s$seed.log" 2>&1 || tail -3 "$logs/monai_${m}_s$seed.log"
    pack
  done
done
python3 - "$logs" <<'PY' | tee "$out/learning.md"
import glob, json, os, sys
print("| run | steps | final loss | val mean Dice at each validation |")
print("|---|---:|---:|---|")
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.jsonl"))):
    loss, dice = {}, []
    for line in open(path):
        j = json.loads(line)
        if "val_mean_dice" in j: dice.append(f'{j["val_mean_dice"]:.3f}')
        elif "loss" in j: loss[j["step"]] = j["loss"]
    last = max(loss) if loss else 0
    print(f"| {os.path.basename(path)[:-6]} | {last} | {loss.get(last, float('nan')):.4f} | {' '.join(dice)} |")
PY
pack
