#!/usr/bin/env bash
# Issue 50 on the GPU machine, one device call: `voxfit plan` of resenc_unet on the real 14-class CT
# (tests/volumes) prepared at 0.7 mm (129 x 433 x 523 voxels, where nnU-Net's presets plan different
# patches), fp16, for the rtx3090, a40 and a100_40gb budgets; beside it nnU-Net's ResEnc M / L / XL
# plans for the same fingerprint and nnU-Net's plan for each card trained under its budget.
#   BUDGETS  default rtx3090,a40,a100_40gb      SPACING  default 0.7
#   LIMIT_S  the plan's share of the call (default 560 s): a plan cut off leaves its log
# carry: .devdeps. Logs and plan.md/plan.json/plan.svg/nnUNetPlans_voxfit.json go to $OUT; plan.md last.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-/tmp/voxfit-plan}
mkdir -p "$out"
start=$(date +%s)
if [ ! -x build-cuda/voxfit ]; then
  OUT=$out VOXFIT_BUILD_TARGETS=voxfit bash tools/device-build.sh --no-tests || exit 1
fi
# shellcheck source=experiments/common.sh
source experiments/common.sh
cache=$work/cache_${SPACING:-0.7}mm
[ -d "$cache" ] || prepare_ct14 "$out/prepare.log" "${SPACING:-0.7}" "$cache" || exit 1
left=$((${LIMIT_S:-560} - ($(date +%s) - start)))
echo "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); plan given ${left} s" | tee "$out/plan.log"
timeout "$left" "$vf" plan --dataset "$cache" --budgets "${BUDGETS:-rtx3090,a40,a100_40gb}" --precision fp16 \
  --warmup-steps 1 --timed-steps 2 --output "$work/plan" >>"$out/plan.log" 2>&1 || tail -5 "$out/plan.log"
cp "$work"/plan/plan.{md,json,svg} "$work/plan/nnUNetPlans_voxfit.json" "$out/" 2>/dev/null
grep -E "^budget|probe" "$out/plan.log" | tail -40
cat "$out/plan.md" 2>/dev/null
