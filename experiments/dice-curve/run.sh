#!/usr/bin/env bash
# On the GPU machine (issue 5): a longer training run on the real 14-class CT and its validation
# Dice curve. `voxfit train` of unet3d (nnU-Net defaults: SGD Nesterov lr 1e-2, poly) and unetr
# (AdamW lr 1e-4) at batch 2, 96^3, fp16, validating by sliding window every VALIDATE_EVERY steps.
# Needs build-cuda/voxfit and .shared-data (tools/stage-device-data.sh). Logs go to $OUT; the
# curve (step, loss, mean Dice) is printed last and written to $OUT/dice_curve.md.
#   CURVE_STEPS      optimiser steps per run (default 1000)
#   VALIDATE_EVERY   steps between validations (default 100)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-/tmp/voxfit-dice-curve}
mkdir -p "$out"
# shellcheck source=experiments/common.sh
source experiments/common.sh
steps=${CURVE_STEPS:-1000}
every=${VALIDATE_EVERY:-100}
prepare_ct14 "$out/prepare.log" || exit 1

{
  echo "# Validation Dice during training (H200, 14-class CT, batch 2, 96^3, fp16)"
  echo
  echo "\`bash experiments/dice-curve/run.sh\` with CURVE_STEPS=$steps VALIDATE_EVERY=$every; one case, so"
  echo "validation is on the training volume (a learning check, not a generalisation result)."
} >"$out/dice_curve.md"
for m in unet3d unetr; do
  rm -rf "$work/curve_$m"
  "$vf" train --dataset "$work/cache" --model $m --batch 2 --precision fp16 --steps "$steps" \
    --validate-every "$every" --log-every 50 --loader-threads 8 --output "$work/curve_$m" \
    >"$out/curve_$m.log" 2>&1 || tail -3 "$out/curve_$m.log"
  cp "$work/curve_$m/log.jsonl" "$out/curve_$m.jsonl" 2>/dev/null
  {
    echo
    echo "## $m ($(grep -h '^trained' "$out/curve_$m.log"))"
    echo
    echo "| step | train loss | mean Dice | classes with Dice > 0.5 |"
    echo "|---:|---:|---:|---:|"
    python3 - "$work/curve_$m/log.jsonl" <<'PY'
import json, sys
loss = {}
for line in open(sys.argv[1]):
    j = json.loads(line)
    if "val_mean_dice" in j:
        d = [v for v in j["val_dice_per_class"] if v is not None]
        near = [loss[s] for s in range(j["step"] - 9, j["step"] + 1) if s in loss]
        print(f"| {j['step']} | {sum(near) / max(1, len(near)):.3f} | {j['val_mean_dice']:.3f} | {sum(v > 0.5 for v in d)} of {len(d)} |")
    else:
        loss[j["step"]] = j["loss"]
PY
  } >>"$out/dice_curve.md"
done
cat "$out/dice_curve.md"
