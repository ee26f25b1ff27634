#!/usr/bin/env bash
# Computes nnU-Net v2's own plans for the real one-case CT dataset (14 classes) that
# experiments/make-ct14-dataset.py writes from tests/volumes/totalsegmentator:
# the fingerprint, then the default planner and the Residual Encoder presets M / L / XL.
# Planning only: no preprocessing, no training, no GPU needed.
#
# Needs a python with nnunetv2==2.8.1 from PyPI (it brings torch), e.g.
#   python3 -m venv /tmp/nnunet-venv && /tmp/nnunet-venv/bin/pip install nnunetv2==2.8.1
# usage: nnunet_plans.sh [PYTHON] [OUT_DIR]
#   PYTHON   default $NNUNET_PYTHON, else python3
#   OUT_DIR  where the plans JSONs and dataset_fingerprint.json go (default: ./nnunet-plans)
# nnU-Net's raw/preprocessed/results folders go to $NNUNET_WORK (default /tmp/nnunet), wiped first.
set -euo pipefail
PY=${1:-${NNUNET_PYTHON:-python3}}
OUT=${2:-nnunet-plans}
WORK=${NNUNET_WORK:-/tmp/nnunet}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BIN=$(dirname "$(command -v "$PY")")   # the nnUNetv2_* entry points sit beside that python
"$PY" -c 'import importlib.metadata as m; v = m.version("nnunetv2"); assert v == "2.8.1", v'

export nnUNet_raw=$WORK/raw nnUNet_preprocessed=$WORK/preprocessed nnUNet_results=$WORK/results
rm -rf "$WORK"; mkdir -p "$nnUNet_raw" "$nnUNet_preprocessed" "$nnUNet_results"

# 1. The MSD-layout dataset (one CT case, labels 0..13), then nnU-Net's raw layout:
#    Dataset501_TotalSegCT14/{imagesTr/ct14_0000.nii.gz, labelsTr/ct14.nii.gz, dataset.json}
"$PY" "$REPO/experiments/make-ct14-dataset.py" "$REPO/tests/volumes/totalsegmentator" "$WORK/msd" >/dev/null
"$PY" - "$WORK/msd" "$nnUNet_raw/Dataset501_TotalSegCT14" <<'PYEOF'
import json, os, shutil, sys
msd, ds = sys.argv[1:]
m = json.load(open(os.path.join(msd, "dataset.json")))
os.makedirs(os.path.join(ds, "imagesTr")); os.makedirs(os.path.join(ds, "labelsTr"))
case = m["training"][0]
shutil.copy(case["image"], os.path.join(ds, "imagesTr", "ct14_0000.nii.gz"))
shutil.copy(os.path.join(msd, case["label"]), os.path.join(ds, "labelsTr", "ct14.nii.gz"))
labels = {("background" if v == "0" else n): int(v) for v, n in m["labels"].items()}
json.dump({"channel_names": {"0": "CT"}, "labels": labels, "numTraining": 1,
           "file_ending": ".nii.gz", "name": m["name"]},
          open(os.path.join(ds, "dataset.json"), "w"), indent=2)
PYEOF

# 2. Fingerprint and plans (the GPU memory targets are the presets' own: 8 / 24 / 40 GB, default 8).
"$BIN/nnUNetv2_extract_fingerprint" -d 501 -np 2 --verify_dataset_integrity
for pl in ExperimentPlanner nnUNetPlannerResEncM nnUNetPlannerResEncL nnUNetPlannerResEncXL; do
  "$BIN/nnUNetv2_plan_experiment" -d 501 -pl "$pl"
done

mkdir -p "$OUT"
cp "$nnUNet_preprocessed"/Dataset501_TotalSegCT14/{dataset_fingerprint.json,nnUNetPlans.json,nnUNetResEncUNet{M,L,XL}Plans.json} "$OUT"/
ls -l "$OUT"
