#!/usr/bin/env bash
# On the GPU machine (issue 26): the fused kernels against the ATen path. Runs the kernel tests
# (voxfit_test_kernels: fused against a float64 reference, every gradient), then training
# throughput (`voxfit train`, 14-class real CT at 1.5 mm, fp16, AdamW, DiceCE, median samples/s
# over 10-step windows) per model, batch, --kernels and layout. Prints a table last.
# Needs build-cuda/ (tools/device-build.sh --no-tests) and .shared-data.
#   MODELS   default "unetr"; BATCHES default "1 2 4"; STEPS default 40
#   VARIANTS default "aten fused fused+graph": words joined by '+': fused (--kernels fused, else
#            aten), graph (--cuda-graph on, else off), cl / ncdhw (--channels-last on / off, else
#            auto: on for unet3d on CUDA), lean (--lean-decoders on)
#   TRAIN_ARGS extra `voxfit train` options for every run (e.g. "--deep-supervision false")
#   TESTS    1 (default) runs the kernel tests first
#   CACHE / SPACING  the prepared cache (default $work/cache at 1.5 mm, made if missing)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-/tmp/voxfit-kernels}
mkdir -p "$out"
# shellcheck source=experiments/common.sh
source experiments/common.sh
if [ "${TESTS:-1}" = 1 ]; then
  build-cuda/tests/voxfit_test_kernels >"$out/kernel_tests.log" 2>&1
  echo "kernel tests: exit $? ($(grep -cE '^\[       OK' "$out/kernel_tests.log") ok, $(grep -cE '^\[  FAILED' "$out/kernel_tests.log") failed lines)"
  grep -E "Failure|error|FAILED|SKIPPED" "$out/kernel_tests.log" | head -20
fi
cache=${CACHE:-$work/cache}
[ -d "$cache" ] || prepare_ct14 "$out/prepare.log" "${SPACING:-1.5}" "$cache" || exit 1
table="$out/kernels.md"
{
  echo "| model | batch | variant | samples/s | loader wait after the first batch | peak reserved |"
  echo "|---|---:|---|---:|---:|---:|"
} >"$table"
for m in ${MODELS:-unetr}; do
  for b in ${BATCHES:-1 2 4}; do
    for v in ${VARIANTS:-aten fused fused+graph}; do
      args=(--kernels aten --cuda-graph off)
      [[ "+$v+" == *+fused+* ]] && args[1]=fused
      [[ "+$v+" == *+graph+* ]] && args[3]=on
      [[ "+$v+" == *+cl+* ]] && args+=(--channels-last on)
      [[ "+$v+" == *+ncdhw+* ]] && args+=(--channels-last off)
      [[ "+$v+" == *+lean+* ]] && args+=(--lean-decoders on)
      run="$work/k_${m}_${b}_$v"
      rm -rf "$run"
      "$vf" train --dataset "$cache" --model "$m" --batch "$b" --precision fp16 --steps "${STEPS:-40}" \
        --log-every 10 --loader-threads 12 "${args[@]}" ${TRAIN_ARGS:-} --output "$run" >"$out/train_${m}_${b}_$v.log" 2>&1 ||
        tail -2 "$out/train_${m}_${b}_$v.log"
      line=$(grep '^trained ' "$out/train_${m}_${b}_$v.log")
      sps=$(sed -nE 's/.* median ([0-9.]+) samples\/s.*/\1/p' <<<"$line")
      wait=$(sed -nE 's/.*loader wait ([0-9.]+%).*/\1/p' <<<"$line")
      peak=$(sed -nE 's/.* \/ (.*) reserved.*/\1/p' <<<"$line")
      echo "| $m | $b | $v | ${sps:--} | ${wait:--} | ${peak:--} |" >>"$table"
    done
  done
done
cat "$table"
