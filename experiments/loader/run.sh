#!/usr/bin/env bash
# Patch-loader throughput on the GPU machine (issue 3): prepares the real TotalSegmentator CT cache
# at 1 mm (8 cases: the torso crop and the DICOM series, 4 ids each), then runs
# `voxfit data bench` with 1, 2, 4, 8 and 16 worker threads at 96^3 and 128^3 patches, with the
# default augmentation, plus 16 threads without augmentation (the read path alone).
# Run from the repository root after `bash tools/device-build.sh --no-tests` and
# `source .devdeps/env`. Logs go to $OUT (default /tmp/voxfit-loader-bench); the table is last.
#   VOXFIT_BIN      the voxfit binary (default build-cuda/voxfit)
#   BENCH_SECONDS   timed seconds per row (default 8)
#   BENCH_BATCH     batch size (default 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/voxfit-loader-bench}
mkdir -p "$out"
vf=${VOXFIT_BIN:-build-cuda/voxfit}
ts=$PWD/tests/volumes/totalsegmentator
seconds=${BENCH_SECONDS:-8}
batch=${BENCH_BATCH:-2}
[ -x "$vf" ] || { echo "gpu-loader-bench: $vf missing (run bash tools/device-build.sh --no-tests)"; exit 1; }
[ -f "$ts/example_ct_sm.nii.gz" ] || { echo "gpu-loader-bench: no data in $ts (tools/stage-device-data.sh)"; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ds="$work/ct"
mkdir -p "$ds/imagesTr" "$ds/labelsTr"
entries=""
for k in 0 1 2 3; do
  ln -s "$ts/example_ct_sm.nii.gz" "$ds/imagesTr/ct_sm_$k.nii.gz"
  ln -s "$ts/example_seg.nii.gz" "$ds/labelsTr/ct_sm_$k.nii.gz"
  ln -s "$ts/example_ct_dicom" "$ds/imagesTr/ct_dicom_$k"
  ln -s "$ts/example_seg_dicom.nii.gz" "$ds/labelsTr/ct_dicom_$k.nii.gz"
  entries+="{\"image\": \"./imagesTr/ct_sm_$k.nii.gz\", \"label\": \"./labelsTr/ct_sm_$k.nii.gz\"},"
  entries+="{\"image\": \"./imagesTr/ct_dicom_$k\", \"label\": \"./labelsTr/ct_dicom_$k.nii.gz\"},"
done
cat >"$ds/dataset.json" <<JSON
{"name": "TotalSegCT", "modality": {"0": "CT"}, "training": [${entries%,}]}
JSON

cache="$work/cache"
start=$(date +%s)
"$vf" data prepare "$ds" --output "$cache" --spacing 1 --threads 16 >"$out/prepare.log" 2>&1 ||
  { tail -5 "$out/prepare.log"; echo "gpu-loader-bench: prepare FAILED"; exit 1; }
echo "prepared in $(( $(date +%s) - start )) s: $(tail -2 "$out/prepare.log" | head -1)"
nproc >"$out/nproc.txt"

for patch in 96 128; do
  "$vf" data bench "$cache" --patch $patch --batch "$batch" --loader-threads 1,2,4,8,16 --seconds "$seconds" \
    --intra-threads 1 >"$out/bench_$patch.txt" 2>&1 || { cat "$out/bench_$patch.txt"; exit 1; }
  "$vf" data bench "$cache" --patch $patch --batch "$batch" --loader-threads 16 --seconds "$seconds" --no-augment \
    --intra-threads 1 >"$out/bench_${patch}_noaug.txt" 2>&1 || { cat "$out/bench_${patch}_noaug.txt"; exit 1; }
done

{
  echo "loader throughput, $(nproc) cores, batch $batch, ${seconds} s per row (need >= 366 patches/s: 3x UNETR's 122 samples/s)"
  for patch in 96 128; do
    echo "patch ${patch}^3, augmentation on:"
    grep -E "^ *[0-9]+ " "$out/bench_$patch.txt" | sed 's/^/  /'
    echo "patch ${patch}^3, augmentation off:"
    grep -E "^ *[0-9]+ " "$out/bench_${patch}_noaug.txt" | sed 's/^/  /'
  done
  echo "columns: threads, patches, patches/s, MB/s, worker busy"
} | tee "$out/table.txt"
