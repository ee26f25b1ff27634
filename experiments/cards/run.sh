#!/usr/bin/env bash
# On the GPU machine: build voxfit (the voxfit target only) against python3's CUDA LibTorch, then
# take the kernel profiles `voxfit cards predict` works from, and predict every card from them:
#   resnet50 and vit_base_patch16_224, float16 and float32, inference, bench protocol (batch 64,
#   TF32 on for float32, channels-last for resnet50, eager: no CUDA graph, as the published cards ran);
#   unetr, swin_unetr, unet3d at 96^3, fp16, a training step at batch 2.
# Everything goes to $OUT/cards.tar.gz (profiles, logs, predictions) and $OUT/cards.md (the
# prediction table, also printed last). Needs .devdeps (carried) like tools/device-build.sh.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-/tmp/voxfit-h200-cards}
work="$out/cards"
mkdir -p "$work"
start=$(date +%s)

build() {
  bash tools/setup.sh || return 1
  # shellcheck disable=SC1091
  source .devdeps/env
  local prefix
  prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)') || return 1
  local generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  if [ ! -f build-cuda/CMakeCache.txt ]; then
    cmake -S . -B build-cuda "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      "-DCMAKE_PREFIX_PATH=$prefix${CMAKE_PREFIX_PATH:+;$CMAKE_PREFIX_PATH}" -DCMAKE_CUDA_ARCHITECTURES=90 || return 1
  fi
  cmake --build build-cuda -j"$(nproc)" --target voxfit
}
if ! build >"$work/build.log" 2>&1; then
  grep -E "error|Error" "$work/build.log" | head -40
  echo "h200-cards: BUILD FAILED (log: cards/build.log in cards.tar.gz)"
  tar -czf "$out/cards.tar.gz" -C "$out" cards && rm -rf "$work"
  exit 1
fi
echo "h200-cards: built in $(( $(date +%s) - start )) s"
# shellcheck disable=SC1091
source .devdeps/env
voxfit=build-cuda/voxfit
{ "$voxfit" info; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; } \
  >"$work/machine.log" 2>&1

profiles=()
profile() {  # profile NAME voxfit-options...
  local name=$1
  shift
  if "$voxfit" cards profile "$@" --output "$work/$name.json" >"$work/$name.log" 2>&1; then
    profiles+=(--profile "$work/$name.json")
  else
    echo "h200-cards: profile $name failed (see $name.log)"
  fi
  tail -2 "$work/$name.log"
}
for m in resnet50 vit_base_patch16_224; do
  for p in float16 float32; do profile "${m}_${p}" --model "$m" --precision "$p" --batch 64; done
done
for m in unetr swin_unetr unet3d; do
  profile "${m}_fp16_train_b2" --model "$m" --precision fp16 --train --batch 2 --patch 96 \
    --warmup-steps 5 --timed-steps 10 --profiled-steps 3
done

if [ ${#profiles[@]} -gt 0 ]; then
  "$voxfit" cards predict "${profiles[@]}" --results experiments/train-sweep/results/h200 --plot off \
    --output "$work/predict" >"$work/predict.log" 2>&1 || { echo "h200-cards: predict failed:"; tail -5 "$work/predict.log"; }
  cp "$work/predict/predictions.md" "$out/cards.md" 2>/dev/null
fi
echo "h200-cards: done in $(( $(date +%s) - start )) s"
tar -czf "$out/cards.tar.gz" -C "$out" cards && rm -rf "$work"
echo
cat "$out/cards.md" 2>/dev/null
