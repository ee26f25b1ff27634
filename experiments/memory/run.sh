#!/usr/bin/env bash
# On the GPU machine (issue 8, goals 2 and 3): the largest batch of UNETR and SwinUNETR (96^3,
# 14-class real CT, fp16) under 24 and 48 GiB, with LibTorch's caching allocator as it comes and
# with expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, LibTorch >= 2.1),
# then the memory-saving switches at 24 GiB. Every search is a `voxfit sweep` point (exact
# boundary by real training steps); each variant journals into its own folder under $OUT.
#   MODELS     default "unetr swin_unetr"
#   BUDGETS    default "24GiB,48GiB"
#   VARIANTS   default "default expandable lean": default = fixed-size segments
#              (expandable_segments:False, LibTorch's own default), lean = expandable + --recompute-modes all
#   RESUME_FROM a folder holding VARIANT/results.jsonl (and probes.jsonl) of an earlier call: those
#              points are not rerun, and a point stopped midway goes on from its probes
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-/tmp/voxfit-memory}
mkdir -p "$out"
# shellcheck source=experiments/common.sh
source experiments/common.sh
prepare_ct14 "$out/prepare.log" || exit 1
for variant in ${VARIANTS:-default expandable lean}; do
  conf="" args=(--budgets "${BUDGETS:-24GiB,48GiB}" --recompute-modes none)
  case $variant in
    default) conf=expandable_segments:False ;;
    expandable) conf=expandable_segments:True ;;
    lean) conf=expandable_segments:True args=(--budgets 24GiB --recompute-modes all) ;;
  esac
  if [ -n "${RESUME_FROM:-}" ] && [ -d "$RESUME_FROM/$variant" ]; then
    mkdir -p "$out/$variant" && cp "$RESUME_FROM/$variant"/{results,probes}.jsonl "$out/$variant/" 2>/dev/null
  fi
  for m in ${MODELS:-unetr swin_unetr}; do
    PYTORCH_CUDA_ALLOC_CONF=$conf "$vf" sweep --dataset "$work/cache" --models "$m" --patches 96 --precisions fp16 \
      "${args[@]}" --no-throughput-table --output "$out/$variant" >>"$out/$variant.log" 2>&1 ||
      tail -3 "$out/$variant.log"
  done
done
echo "| variant | model | budget | checkpointing | max batch | first failing | probes | seconds | peak allocated GiB | peak reserved GiB | samples/s at max |"
echo "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
for variant in ${VARIANTS:-default expandable lean}; do
  [ -f "$out/$variant/results.jsonl" ] || continue
  python3 - "$out/$variant/results.jsonl" "$variant" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if "max_batch" not in e: continue
    at = [p for p in e.get("probe_log", []) if p.get("batch") == e["max_batch"] and p.get("fits")]
    gib = lambda k: f"{at[-1][k] / 2**30:.2f}" if at and k in at[-1] else "-"
    sps = f"{at[-1]['samples_per_s']:.1f}" if at and "samples_per_s" in at[-1] else "-"
    print(f"| {sys.argv[2]} | {e['model']} | {e['budget']} | {e['checkpoint']} | {e['max_batch']} | "
          f"{e['first_failing']} | {e['probes']} | {e['seconds']:.0f} | {gib('peak_allocated_bytes')} | "
          f"{gib('peak_reserved_bytes')} | {sps} |")
PY
done
