#!/usr/bin/env bash
# Issue 30 on the GPU machine: voxfit and MONAI train the same network on the same real data for
# the same steps, batch (2), patch and precision (fp16), and both log the mean validation Dice by
# sliding window every VALIDATE_EVERY steps. Two data sets (DATASETS):
#   ct  the real 14-class CT (tests/volumes/totalsegmentator), 1.5 mm, CT window; patch 96^3
#   mr  Debian's demo T1 MRI with its 7-class k-means segmentation (`voxfit data demo --cases 1`:
#       the scan itself, no synthetic copies), on its own 2 x 2 x 3 mm grid, z-score over the
#       non-zero voxels (nnU-Net's non-CT scheme, voxfit's `auto` for an MRI channel); patch 64^3
#       (62 x 87 x 86 voxels after the crop to non-zero: 64 pads 2 slices; 64 is divisible by 16
#       for UNETR's ViT and by 32 for unet3d / DynUNet's 5 halvings; cubic, so the two tools' axis
#       orders cannot disagree)
# voxfit: `voxfit train` with its defaults for the network (unetr: AdamW 1e-4; unet3d: nnU-Net's
# SGD 1e-2 poly, deep supervision), the class count from its prepared plan; MONAI:
# experiments/learning/peer_learn.py (the BTCV tutorial's pipeline; UNETR, or DynUNet as nnU-Net's
# 3d_fullres), the class count from the dataset.json. Needs build-cuda/voxfit and .shared-data
# (tools/stage-device-data.sh: MONAI, nibabel and the demo MRI in .shared-data/demo). Logs and the
# jsonl curves ({voxfit,monai}_MODEL_DATASET_sSEED.jsonl) go to $OUT (packed into
# $OUT/learning.tar.gz); the table of final Dice per run is printed last.
# experiments/learning/plot.sh draws the curves from them, one PNG per network and data set.
#   DATASETS        default "ct mr"
#   MODELS          default "unetr unet3d" (MONAI's peer of unet3d is its DynUNet)
#   SEEDS           default "0"
#   STEPS           default 2000; VALIDATE_EVERY default 200; BATCH default 2
#   PATCH_CT        default 96; PATCH_MR default 64 (one edge: both tools get a cube)
#   DEVICE          default cuda (fp16); cpu trains in fp32, for a smoke test
#   LOADER_THREADS  voxfit's loader threads, default 12; WORKERS MONAI's, default 8
#   SIDES           default "voxfit monai": which tools run (the MONAI side of a curve already
#                   measured need not run again: MONAI's UNETR takes about 8 minutes on the CT)
#   VOXFIT_ARGS     extra `voxfit train` options (e.g. "--flip-probability 0.5 --schedule poly", the defaults before
#                   session 42; "--augment mirror", the nearest to MONAI's augmentation);
#   TAG             (no underscores) then names voxfit's runs voxfit-TAG_MODEL_DATASET_sSEED, so
#                   variants sit beside the default run and plot.sh draws each as its own line
#   VOXFIT_BIN, WORK (experiments/common.sh); VOXFIT_DEMO_MRI_DIR default .shared-data/demo
#   PEER_PYTHONPATH default .shared-data/peers:.shared-data/pylib (MONAI, nibabel, einops)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-/tmp/voxfit-learning}
logs=/tmp/learning-logs
rm -rf "$logs" && mkdir -p "$logs" "$out"
# shellcheck source=experiments/common.sh
source experiments/common.sh
steps=${STEPS:-2000}
every=${VALIDATE_EVERY:-200}
batch=${BATCH:-2}
device=${DEVICE:-cuda}
precision=fp16
[ "$device" = cpu ] && precision=fp32
if [ -z "${VOXFIT_DEMO_MRI_DIR:-}" ] && [ -f .shared-data/demo/KmeansTest_T1UCharRaw.nii.gz ]; then
  export VOXFIT_DEMO_MRI_DIR=$PWD/.shared-data/demo
fi
export PYTHONPATH=${PEER_PYTHONPATH:-$PWD/.shared-data/peers:$PWD/.shared-data/pylib}
pack() { tar -czf "$out/learning.tar.gz" -C "$logs" .; }

# prepare_mr LOG: the demo MR as a one-case dataset (validation on the training volume, as the
# CT's), prepared on its own grid (the dataset's median spacing) with z-score normalisation.
prepare_mr() {
  { "$vf" data demo "$work/mr" --cases 1 &&
    "$vf" data prepare "$work/mr/dataset.json" --output "$work/cache-mr" --normalisation zscore -q; } >"$1" 2>&1 ||
    { cat "$1"; return 1; }
}

for ds in ${DATASETS:-ct mr}; do
  case $ds in
    ct) prepare_ct14 "$logs/prepare-ct.log" || continue
        json=$work/ct14/dataset.json cache=$work/cache patch=${PATCH_CT:-96}
        peer_data=('--window=-175,250' --spacing 1.5)  # '=': argparse takes -175 for an option
        title="real 14-class CT, 1.5 mm" ;;
    mr) prepare_mr "$logs/prepare-mr.log" || continue
        json=$work/mr/dataset.json cache=$work/cache-mr patch=${PATCH_MR:-64}
        peer_data=(--window none --spacing none)
        title="real T1 MR (Debian demo), 7 classes, 2 x 2 x 3 mm" ;;
    *) echo "run.sh: unknown data set '$ds' (ct or mr)" >&2; continue ;;
  esac
  echo "$title; batch $batch, ${patch}^3, $precision, $steps steps" >"$logs/learning-$ds.title"
  for m in ${MODELS:-unetr unet3d}; do
    peer=$m
    [ "$m" = unet3d ] && peer=dynunet
    for seed in ${SEEDS:-0}; do
      name=${m}_${ds}_s$seed
      if [[ " ${SIDES:-voxfit monai} " == *" voxfit "* ]]; then
        vname=voxfit${TAG:+-$TAG}_$name
        run="$work/learn_$vname"
        rm -rf "$run"
        # shellcheck disable=SC2086  # VOXFIT_ARGS is a list of options
        "$vf" train --dataset "$cache" --model "$m" --batch "$batch" --patch "$patch" --precision "$precision" \
          --device "$device" --steps "$steps" --validate-every "$every" --log-every 50 \
          --loader-threads "${LOADER_THREADS:-12}" --seed "$seed" --output "$run" ${VOXFIT_ARGS:-} \
          >"$logs/$vname.log" 2>&1 || tail -3 "$logs/$vname.log"
        cp "$run/log.jsonl" "$logs/$vname.jsonl" 2>/dev/null
        pack
      fi
      [[ " ${SIDES:-voxfit monai} " == *" monai "* ]] || continue
      python3 experiments/learning/peer_learn.py --dataset "$json" --model "$peer" "${peer_data[@]}" --patch "$patch" \
        --batch "$batch" --device "$device" --steps "$steps" --validate-every "$every" --seed "$seed" \
        --workers "${WORKERS:-8}" --output "$logs/monai_$name.jsonl" \
        >"$logs/monai_$name.log" 2>&1 || tail -3 "$logs/monai_$name.log"
      pack
    done
  done
done
python3 - "$logs" <<'PY' | tee "$out/learning.md"
import glob, json, os, sys
print("| run | data | steps | final loss | val mean Dice at each validation |")
print("|---|---|---:|---:|---|")
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.jsonl")), key=lambda p: (os.path.basename(p).split("_")[-2], os.path.basename(p))):
    loss, dice = {}, []
    for line in open(path):
        j = json.loads(line)
        if "val_mean_dice" in j: dice.append(f'{j["val_mean_dice"]:.3f}')
        elif "loss" in j: loss[j["step"]] = j["loss"]
    last = max(loss) if loss else 0
    name = os.path.basename(path)[:-6]
    print(f"| {name} | {name.split('_')[-2]} | {last} | {loss.get(last, float('nan')):.4f} | {' '.join(dice)} |")
PY
pack
