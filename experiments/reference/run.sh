#!/usr/bin/env bash
# voxfit bench and timm side by side on the GPU machine, in one command (about 3 minutes):
#   bash tools/device-build.sh --no-tests && bash experiments/reference/run.sh
# Two models x two precisions at batch 64 x 30 steps, 5 iterations, random input, cuDNN benchmark
# on, TF32 matrix products off for both tools (PyTorch 2.x's default); then both with TF32 on for
# float32 (the reference's PyTorch 1.9 default), voxfit without CUDA graphs, and the ViT with each
# tool's fused and explicit attention (where a ViT gap comes from). Logs, voxfit's
# JSON results and reference.md (the table, printed last) go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-/tmp/voxfit-h200-reference}
mkdir -p "$out"
if [ -f .devdeps/env ]; then
  # shellcheck disable=SC1091
  source .devdeps/env
fi
voxfit=${VOXFIT_BIN:-build-cuda/voxfit}
if [ ! -x "$voxfit" ]; then
  echo "h200-reference: $voxfit is missing (run: bash tools/device-build.sh --no-tests)"
  exit 1
fi
models=(resnet50 vit_base_patch16_224)
precisions=(float16 float32)
common=(--device cuda:0 --batch 64 --steps 30 --iterations 5 --input random)

# The steady state (mean images/s of iterations 1..N-1) of one setting's reference line in a log.
steady() {
  grep -m1 "^Namespace(device=0, model='$2', precision='$3', train=False)" "$1" 2>/dev/null |
    grep -oE 'Iteration [0-9]+, [0-9.]+ images/s' |
    awk '$2 != "0," { s += $3; n++ } END { if (n) printf "%.0f", s / n; else printf "n/a" }'
}

bench() {  # bench LOGNAME MODEL PRECISION [voxfit options...]
  local log=$1 model=$2 precision=$3
  shift 3
  "$voxfit" bench --model "$model" --precision "$precision" "${common[@]}" "$@" \
    --json "$out/$log.json" >"$out/$log.log" 2>&1 || echo "h200-reference: voxfit $log failed (see $log.log)"
  head -c 2000 "$out/$log.log"
}

start=$(date +%s)
{ "$voxfit" info; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } \
  >"$out/machine.log" 2>&1
for m in "${models[@]}"; do
  for p in "${precisions[@]}"; do bench "voxfit_${m}_${p}" "$m" "$p" --tf32 off; done
done
python3 experiments/reference/timm_reference.py --model "${models[@]}" --precision "${precisions[@]}" "${common[@]}" \
  --tf32 off >"$out/timm.log" 2>"$out/timm.err" || echo "h200-reference: timm failed (see timm.err)"
cat "$out/timm.log"
python3 experiments/reference/timm_reference.py --model "${models[@]}" --precision float32 "${common[@]}" \
  --tf32 on >"$out/timm_tf32.log" 2>"$out/timm_tf32.err" || echo "h200-reference: timm (TF32) failed (see timm_tf32.err)"
cat "$out/timm_tf32.log"
for m in "${models[@]}"; do bench "voxfit_${m}_float32_tf32" "$m" float32 --tf32 on; done
for m in "${models[@]}"; do
  for p in "${precisions[@]}"; do bench "voxfit_${m}_${p}_nograph" "$m" "$p" --tf32 off --cuda-graph off; done
done
# Where the ViT's time goes: each tool's fused (SDPA) against its explicit matmul-softmax attention.
vit=vit_base_patch16_224
bench "voxfit_vit_float16_sdpa" "$vit" float16 --attention sdpa
bench "voxfit_vit_float16_math" "$vit" float16 --attention math
python3 experiments/reference/timm_reference.py --model "$vit" --precision float16 "${common[@]}" --fused-attn off \
  >"$out/timm_math.log" 2>"$out/timm_math.err" || echo "h200-reference: timm (math attention) failed (see timm_math.err)"
cat "$out/timm_math.log"

row() {  # row SETTING VOXFIT_LOG TIMM_LOG MODEL PRECISION
  local v t r
  v=$(steady "$out/$2.log" "$4" "$5")
  t=$(steady "$out/$3.log" "$4" "$5")
  r=$(awk -v v="$v" -v t="$t" 'BEGIN { if (v + 0 > 0 && t + 0 > 0) printf "%.2f", v / t; else printf "n/a" }')
  echo "| $1 | $v | $t | $r |"
}
{
  echo "# voxfit bench vs timm on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  echo
  echo "Batch 64 x 30 steps = 1920 images per iteration, 5 iterations, steady state = mean of"
  echo "iterations 1-4, random input, cuDNN benchmark on, inference. voxfit: channels-last auto"
  echo "(on for resnet50), CUDA graph on unless marked, attention auto (sdpa). timm $(python3 -c 'import timm; print(timm.__version__)' 2>/dev/null),"
  echo "torch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null), eager. Logs: $out. Total $(( $(date +%s) - start )) s."
  echo
  echo "| setting | voxfit img/s | timm img/s | voxfit / timm |"
  echo "|---|---:|---:|---:|"
  for m in "${models[@]}"; do
    for p in "${precisions[@]}"; do
      tf=""
      [ "$p" = float32 ] && tf=", TF32 matmul off"
      row "$m $p$tf" "voxfit_${m}_${p}" timm "$m" "$p"
    done
  done
  for m in "${models[@]}"; do row "$m float32, TF32 matmul on" "voxfit_${m}_float32_tf32" timm_tf32 "$m" float32; done
  for m in "${models[@]}"; do
    for p in "${precisions[@]}"; do
      tf=""
      [ "$p" = float32 ] && tf=", TF32 matmul off"
      row "$m $p$tf, voxfit without CUDA graph" "voxfit_${m}_${p}_nograph" timm "$m" "$p"
    done
  done
  row "$vit float16, voxfit --attention sdpa" voxfit_vit_float16_sdpa timm "$vit" float16
  row "$vit float16, voxfit --attention math vs timm fused_attn off" voxfit_vit_float16_math timm_math "$vit" float16
} >"$out/reference.md"
echo
cat "$out/reference.md"
