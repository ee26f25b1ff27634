#!/usr/bin/env bash
# On the GPU machine (issue 6): the experiments/24gb_vs_48gb.ini grid on the real 14-class CT at
# 1.5 mm (experiments/make-ct14-dataset.py), with build-cuda/voxfit. The sweep resumes from its journal:
# put the results.jsonl of an earlier call in SWEEP_DIR first and only the missing points run.
# It stops after SWEEP_SECONDS (default 420; every finished point is already journalled), then
# copies results.jsonl, results.csv and summary.md to $OUT/sweep and prints the summary. Plots
# need gnuplot, which the GPU machine lacks: make them where it exists with
#   voxfit sweep --output DIR --report-only   (DIR holding results.jsonl)
#   SWEEP_ARGS     extra `voxfit sweep` options, e.g. "--patches 96 --precisions fp16,bf16"
#   SWEEP_DIR      the sweep's output folder (default /tmp/voxfit-grid); when it holds no journal
#                  yet, the committed experiments/grid/results/h200/results.jsonl (and probes.jsonl,
#                  the probes of a point stopped midway, if any) is copied in, so a new session
#                  continues the grid where the last one stopped
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-/tmp/voxfit-grid-out}
mkdir -p "$out/sweep"
# shellcheck source=experiments/common.sh
source experiments/common.sh
dir=${SWEEP_DIR:-/tmp/voxfit-grid}
mkdir -p "$dir"
[ -f "$dir/results.jsonl" ] || cp experiments/grid/results/h200/{results,probes}.jsonl "$dir/" 2>/dev/null
prepare_ct14 "$out/prepare.log" || exit 1
# shellcheck disable=SC2086
timeout -s INT "${SWEEP_SECONDS:-420}" "$vf" sweep --config experiments/24gb_vs_48gb.ini --dataset "$work/cache" \
  --output "$dir" ${SWEEP_ARGS:-} >>"$out/sweep.log" 2>&1
echo "h200-grid: sweep exit $? ($(wc -l <"$dir/results.jsonl" 2>/dev/null || echo 0) points journalled)"
cp "$dir"/results.jsonl "$dir"/probes.jsonl "$dir"/results.csv "$dir"/summary.md "$out/sweep/" 2>/dev/null
cat "$dir/summary.md" 2>/dev/null | head -60
