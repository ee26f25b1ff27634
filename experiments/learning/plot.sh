#!/usr/bin/env bash
# Draws the learning curves of experiments/learning/run.sh: per network and data set, the mean
# validation Dice of every voxfit and MONAI run (one line per seed) against the step, as
# DIR/learning-MODEL-DATASET.png (gnuplot, pngcairo). DIR holds the
# {voxfit,monai}_MODEL_DATASET_sSEED.jsonl files and, from run.sh, learning-DATASET.title (the
# data set, batch, patch and precision for the plot's title).
#   usage: experiments/learning/plot.sh DIR
set -euo pipefail
dir=${1:?usage: plot.sh DIR}
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot is not installed" >&2; exit 1; }
# MODEL may hold underscores (swin_unetr); DATASET is the last name before _sSEED.
ls "$dir" | sed -nE 's/^(voxfit(-[^_]+)?|monai)_(.+)_([^_]+)_s[0-9]+\.jsonl$/\3 \4/p' | sort -u | while read -r model ds; do
  plots=()
  for f in "$dir"/voxfit_"$model"_"$ds"_s*.jsonl "$dir"/voxfit-*_"$model"_"$ds"_s*.jsonl \
    "$dir"/monai_"$model"_"$ds"_s*.jsonl; do
    [ -f "$f" ] || continue
    python3 -c '
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    if "val_mean_dice" in j: print(j["step"], j["val_mean_dice"])' "$f" >"${f%.jsonl}.dat"
    name=$(basename "${f%.jsonl}")
    plots+=("'${f%.jsonl}.dat' using 1:2 with linespoints title '${name//_/ }'")
  done
  [ ${#plots[@]} -gt 0 ] || continue
  title=$ds
  [ -f "$dir/learning-$ds.title" ] && title=$(head -1 "$dir/learning-$ds.title")
  title=${title//\"/}
  gnuplot <<EOF
set terminal pngcairo size 900,560
set output '$dir/learning-$model-$ds.png'
set title "Mean validation Dice, $model: voxfit vs MONAI\\n$title"
set xlabel 'optimiser step'
set ylabel 'mean Dice (foreground classes)'
set yrange [0:1]
set key right bottom
set grid
plot $(IFS=,; echo "${plots[*]}")
EOF
  echo "$dir/learning-$model-$ds.png"
done
