#!/usr/bin/env bash
# On the GPU machine (issue 4): every network trains a few steps at its reference setting, batch 2.
# The 3D networks with `voxfit train` (96^3, 14-class real CT at 1.5 mm, fp16 and bf16 autocast);
# ResNet50 and ViT-B/16 with `voxfit bench --train` (224^2, SGD step, pure float16 / bfloat16 weights
# and inputs as the reference protocol's `.half()`, and float32).
# Needs build-cuda/voxfit and .shared-data. Logs go to $OUT; the table is printed last.
#   STEPS   training steps per 3D run (default 20)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-/tmp/voxfit-steps}
mkdir -p "$out"
# shellcheck source=experiments/common.sh
source experiments/common.sh
steps=${STEPS:-20}
prepare_ct14 "$out/prepare.log" || exit 1
table="$out/steps.md"
{
  echo "| network | precision | batch | samples/s (median) | peak allocated | peak reserved |"
  echo "|---|---|---:|---:|---:|---:|"
} >"$table"
for m in unetr swin_unetr unet3d; do
  for p in fp16 bf16; do
    rm -rf "$work/steps_${m}_$p"
    "$vf" train --dataset "$work/cache" --model $m --batch 2 --precision $p --steps "$steps" --log-every 5 \
      --loader-threads 8 --output "$work/steps_${m}_$p" >"$out/train_${m}_$p.log" 2>&1 || tail -2 "$out/train_${m}_$p.log"
    # "trained N steps: loss L, best validation Dice D, median S samples/s, loader wait W after the first batch (T s), peak A allocated / R reserved"
    sed -nE "s/^trained .* median ([0-9.]+) samples\/s.*peak (.*) allocated \/ (.*) reserved$/| $m | $p | 2 | \1 | \2 | \3 |/p" \
      "$out/train_${m}_$p.log" >>"$table"
  done
done
for m in resnet50 vit_base_patch16_224; do
  for p in float16 bfloat16 float32; do
    "$vf" bench --model $m --precision $p --train --batch 2 --steps 20 --iterations 3 --json "$out/bench_${m}_$p.json" \
      >"$out/bench_${m}_$p.log" 2>&1 || tail -2 "$out/bench_${m}_$p.log"
    python3 - "$out/bench_${m}_$p.json" "$m" "$p" >>"$table" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
gib = lambda b: f"{b / 2**30:.2f} GiB"
m = j["peak_memory"]
print(f"| {sys.argv[2]} (bench --train) | {sys.argv[3]} | 2 | {j['steady_state']['images_per_s']:.1f} | {gib(m['allocated'])} | {gib(m['reserved'])} |")
PY
  done
done
cat "$table"
