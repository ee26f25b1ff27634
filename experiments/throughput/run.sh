#!/usr/bin/env bash
# On the GPU machine (issue 8, goal 1): training throughput of UNETR and SwinUNETR at batch 1, 2
# and 4 (96^3, 14-class real CT at 1.5 mm, fp16 autocast, AdamW, DiceCE: MONAI's settings in
# ../shared/reference/peers_h200.md), each a `voxfit train` run. samples/s is the trainer's median
# over the steps, each step timed as the mean of its 10-step log window: the first window (cuDNN
# autotuning) is one of four at 40 steps and does not move the median. The ratio to MONAI's two
# published runs is printed beside it.
# Needs build-cuda/voxfit and .shared-data. Logs go to $OUT; the table is printed last.
#   STEPS    training steps per run (default 40)
#   BATCHES  default "1 2 4"
#   MODELS   default "unetr swin_unetr"
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-/tmp/voxfit-throughput}
mkdir -p "$out"
# shellcheck source=experiments/common.sh
source experiments/common.sh
prepare_ct14 "$out/prepare.log" || exit 1
# MONAI fp16 samples/s on this H200, runs 1 / 2 (peers_h200.md); empty: not published.
declare -A monai=([unetr_1]="21.1 25.2" [unetr_2]="35.0 40.8" [unetr_4]="58.9 63.3"
                  [swin_unetr_1]="14.8 14.4" [swin_unetr_2]="21.2 21.2")
table="$out/throughput.md"
{
  echo "| model | batch | voxfit samples/s | MONAI samples/s (run 1 / 2) | ratio |"
  echo "|---|---:|---:|---:|---:|"
} >"$table"
for m in ${MODELS:-unetr swin_unetr}; do
  for b in ${BATCHES:-1 2 4}; do
    rm -rf "$work/tput_${m}_$b"
    "$vf" train --dataset "$work/cache" --model "$m" --batch "$b" --precision fp16 --steps "${STEPS:-40}" \
      --log-every 10 --loader-threads 12 --output "$work/tput_${m}_$b" >"$out/train_${m}_$b.log" 2>&1 ||
      tail -2 "$out/train_${m}_$b.log"
    sps=$(sed -nE 's/^trained .* median ([0-9.]+) samples\/s.*/\1/p' "$out/train_${m}_$b.log")
    read -r r1 r2 <<<"${monai[${m}_$b]:-}"
    ratio=-
    [ -n "$sps" ] && [ -n "${r1:-}" ] && ratio=$(python3 -c "a,b=sorted(($r1,$r2)); print(f'{$sps/b:.2f}-{$sps/a:.2f}')")
    echo "| $m | $b | ${sps:--} | ${r1:--} / ${r2:--} | $ratio |" >>"$table"
  done
done
cat "$table"
