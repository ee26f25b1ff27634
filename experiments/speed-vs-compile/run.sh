#!/usr/bin/env bash
# On the GPU machine (issue 26), one device call: build (tools/device-build.sh --no-tests) unless
# build-cuda/voxfit exists, the kernel tests, the aten / fused training-throughput matrix
# (experiments/kernels/run.sh), and kernel profiles of the fused training steps and the reference
# inference (`voxfit cards profile`, summarised by `voxfit cards utilisation`). Everything goes to
# $OUT/issue26.tar.gz, the tables to $OUT/summary.md (printed last, ending with table.py's ratios).
#   PHASES  default "build tests kernels bench profile"; also "peers" (MONAI + torch.compile, timm)
#   PEER_SEG "model:batches[:patch] ..." (default unetr:1,2,4; patch 96); PEER_REF "model:precision ..." (timm,
#            channels-last + compile, and TF32 for float32)
#   BENCH    "model:precision ..." of the bench phase (default resnet50:float16), each with --kernels aten and fused
#   PROFILES default "unetr_b2 swin_unetr_b2 unet3d_b2 resnet50_f16"; PROFILE_ARGS extra `cards profile`
#            options of the segmentation profiles (e.g. "--channels-last on --cuda-graph off")
#   KERNEL_SPECS "model|batches|variants[|extra train options];..." (experiments/kernels/run.sh's VARIANTS)
#   table (phase, issue 52): each row ROUNDS (2) times, voxfit then `peer_seg.py --fast` (or `peer_ref.py
#            --fast`) alternating, so each side's spread inside the call is on the table (table.py).
#            TABLE_ROWS "model:batches:patch[:variant] ..." (default unetr:1,2,4:96 swin_unetr:1,2,4:96
#            unet3d:2:96 unet3d:2:128); a variant ("+" for spaces, e.g. --channels-last+on) is a second voxfit
#            run each round, right after the default one and against the same peer rounds (t_..._voxfit-v.log);
#            TABLE_REF "model:precision ..." (default none; e.g. resnet50:float16)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-/tmp/voxfit-issue26}
logs=/tmp/issue26-logs
rm -rf "$logs" && mkdir -p "$logs" "$out"
summary="$out/summary.md"
: >"$summary"
phases=" ${PHASES:-build tests kernels bench profile} "
has() { [[ "$phases" == *" $1 "* ]]; }
start=$(date +%s)
# Each phase packs what the last ones logged, so a call cut off by its time limit still returns them.
stamp() {
  echo "[$(( $(date +%s) - start )) s] $*" | tee -a "$logs/timeline.log"
  tar -czf "$out/issue26.tar.gz" -C "$logs" . 2>/dev/null
}

if has build || [ ! -x build-cuda/voxfit ]; then
  stamp build
  OUT=$logs bash tools/device-build.sh --no-tests || { cp "$logs/build.log" "$out/"; exit 1; }
fi
# shellcheck source=experiments/common.sh
source experiments/common.sh
[ -d "$work/cache" ] || prepare_ct14 "$logs/prepare.log" || exit 1

if has tests; then
  stamp tests
  for t in "kernels:*" "train:CudaGraph*:FusedDiceCe*" "models:FoldForInference*:*Sdpa*:SwinWindows*:*FusedMode*:VitInference*"; do
    exe=build-cuda/tests/voxfit_test_${t%%:*}
    $exe --gtest_filter="${t#*:}" >"$logs/tests_${t%%:*}.log" 2>&1
    { echo "## tests $t: exit $?"; grep -E "^\[  PASSED|^\[  FAILED|SKIPPED \]" "$logs/tests_${t%%:*}.log" | head -20
      grep -B2 -A6 "Failure" "$logs/tests_${t%%:*}.log" | head -40; } >>"$summary"
  done
fi

if has kernels; then
  stamp kernels
  IFS=';' read -ra specs <<<"${KERNEL_SPECS:-unetr|1 2 4|aten fused fused+graph;swin_unetr|1 2 4|aten fused+graph;unet3d|2|aten fused+graph fused+graph+cl}"
  for spec in "${specs[@]}"; do
    IFS='|' read -r m b v extra <<<"$spec"
    tag=$m${extra:+_$(tr -cs 'a-z0-9' '_' <<<"$extra" | sed 's/_*$//')}
    # 128^3 patches: the CT at 0.7 mm (129 voxels deep; 60 at 1.5 mm), so a patch is CT, not padding.
    cache=$work/cache spacing=1.5
    [[ "$extra" == *"--patch 128"* ]] && cache=$work/cache_07mm spacing=0.7
    CACHE=$cache SPACING=$spacing OUT=$logs/k_$tag MODELS=$m BATCHES=$b VARIANTS=$v TRAIN_ARGS=$extra TESTS=0 bash experiments/kernels/run.sh >/dev/null 2>&1
    { echo; echo "## throughput $m $extra"; cat "$logs/k_$tag/kernels.md"; } >>"$summary"
  done
fi

if has bench; then
  stamp bench
  for spec in ${BENCH:-resnet50:float16}; do  # model:precision
    m=${spec%%:*} p=${spec#*:}
    for k in aten fused; do
      "$vf" bench --model "$m" --precision "$p" --device cuda:0 --batch 64 --steps 30 --iterations 5 --input random \
        --kernels $k >"$logs/bench_${m}_${p}_$k.log" 2>&1
      { echo "## bench $m $p --kernels $k"; grep -E "Iteration|settings|rror" "$logs/bench_${m}_${p}_$k.log" | tail -4; } >>"$summary"
    done
  done
fi

if has peers; then
  # The compiled peers (the fastest setting of each), right after voxfit's runs of the same
  # configurations above.
  export PYTHONPATH=$PWD/.shared-data/peers
  peer=.shared-data/peers
  for spec in ${PEER_SEG-unetr:1,2,4}; do  # model:batches[:patch]; PEER_SEG="" runs none
    IFS=: read -r m pb pp <<<"$spec"
    pp=${pp:-96}
    stamp "peer $m $pp"
    plog=$logs/peer_${m}_${pp}_b${pb//,/-}_compile.log  # the batches in the name: one model may run twice
    python3 "$peer/peer_seg.py" --model "$m" --batches "$pb" --patch "$pp" --no-search --compile --steps 20 \
      >"$plog" 2>&1
    { echo; echo "## MONAI $m patch $pp + torch.compile"; grep -E '^\{' "$plog" | tail -6; } >>"$summary"
    tar -czf "$out/issue26.tar.gz" -C "$logs" . 2>/dev/null  # a peer can outlast the call: keep what came
  done
  for spec in ${PEER_REF:-}; do  # model:precision
    stamp "peer $spec"
    tf32=()
    [ "${spec#*:}" = float32 ] && tf32=(--tf32)  # its fastest float32: TF32 matrix products, as voxfit's bench default
    python3 "$peer/peer_ref.py" --model "${spec%%:*}" --precision "${spec#*:}" --channels-last --compile "${tf32[@]}" \
      >"$logs/peer_ref_${spec/:/_}.log" 2>&1
    { echo; echo "## timm $spec channels-last + torch.compile"; tail -c 600 "$logs/peer_ref_${spec/:/_}.log"; } >>"$summary"
  done
fi

if has table; then
  # One workload at a time, voxfit then its --fast peer, ROUNDS times: t_<row>_r<round>_{voxfit,peer}.log
  export PYTHONPATH=$PWD/.shared-data/peers
  peer=.shared-data/peers
  for spec in ${TABLE_ROWS-unetr:1,2,4:96 swin_unetr:1,2,4:96 unet3d:2:96 unet3d:2:128}; do  # TABLE_ROWS="" runs none
    IFS=: read -r m batches pp variant <<<"$spec"
    pm=$m cache=$work/cache
    [ "$m" = unet3d ] && pm=dynunet
    if [ "$pp" = 128 ]; then  # the CT at 0.7 mm (129 voxels deep), so a patch is CT, not padding
      cache=$work/cache_07mm
      [ -d "$cache" ] || prepare_ct14 "$logs/prepare_07mm.log" 0.7 "$cache" || continue
    fi
    extra=()
    [ "$m" = unet3d ] && extra=(--deep-supervision false)  # as the DynUNet peer trains
    for b in ${batches//,/ }; do
      for r in $(seq "${ROUNDS:-2}"); do
        row=t_${m}_${pp}_b${b}_r$r
        stamp "$row"
        for v in default ${variant:+variant}; do
          args=("${extra[@]}") log=$logs/${row}_voxfit.log
          if [ "$v" = variant ]; then
            read -ra more <<<"${variant//+/ }"
            args+=("${more[@]}") log=$logs/${row}_voxfit-v.log
          fi
          rm -rf "$work/$row"
          { echo "# voxfit train ${args[*]}"; "$vf" train --dataset "$cache" --model "$m" --patch "$pp" --batch "$b" \
              --precision fp16 --optimizer adamw --lr 1e-4 --steps 60 --log-every 10 --loader-threads 12 "${args[@]}" \
              --output "$work/$row"; } >"$log" 2>&1 || tail -2 "$log"
        done
        timeout 400 python3 "$peer/peer_seg.py" --model "$pm" --batches "$b" --patch "$pp" --no-search --fast \
          --steps 20 --warmup 5 >"$logs/${row}_peer.log" 2>&1 || tail -2 "$logs/${row}_peer.log"
      done
    done
  done
  for spec in ${TABLE_REF:-}; do  # model:precision, inference at batch 64
    m=${spec%%:*} p=${spec#*:}
    tf32=()
    [ "$p" = float32 ] && tf32=(--tf32)
    for r in $(seq "${ROUNDS:-2}"); do
      row=t_ref_${m}_${p}_r$r
      stamp "$row"
      "$vf" bench --model "$m" --precision "$p" --device cuda:0 --batch 64 --steps 30 --iterations 5 --input random \
        >"$logs/${row}_voxfit.log" 2>&1 || tail -2 "$logs/${row}_voxfit.log"
      timeout 400 python3 "$peer/peer_ref.py" --model "$m" --precision "$p" --fast "${tf32[@]}" \
        >"$logs/${row}_peer.log" 2>&1 || tail -2 "$logs/${row}_peer.log"
    done
  done
fi

if has profile; then
  stamp profile
  for p in ${PROFILES:-unetr_b2 swin_unetr_b2 unet3d_b2 resnet50_f16}; do
    case $p in
      resnet50_f16) args=(--model resnet50 --precision float16 --batch 64) ;;
      *) args=(--model "${p%_b*}" --precision fp16 --train --batch "${p##*_b}" --patch 96 --warmup-steps 5
               --timed-steps 10 --profiled-steps 3 --kernels "${KERNELS:-fused}" ${PROFILE_ARGS:-}) ;;
    esac
    "$vf" cards profile "${args[@]}" --output "$logs/prof_$p.json" >"$logs/prof_$p.log" 2>&1 ||
      tail -3 "$logs/prof_$p.log"
  done
  for f in "$logs"/prof_*.json; do "$vf" cards utilisation --top 12 --profile "$f"; done >"$logs/profiles.md" 2>&1
  { echo; echo "## profiles"; cat "$logs/profiles.md"; } >>"$summary"
fi

{ echo; echo "## voxfit against the compiled peers (table.py)"; python3 experiments/speed-vs-compile/table.py "$logs"; } >>"$summary"
stamp done
cat "$summary"
