# shellcheck shell=bash
# Sourced by the experiments/*/run.sh scripts (not run on its own): the binary, the staged data and the
# 14-class real CT dataset they share, prepared at 1.5 mm into $work/cache.
#   VOXFIT_BIN     the voxfit binary (default build-cuda/voxfit)
#   WORK           scratch folder (default /tmp/voxfit-work)
# A carried .devdeps replaces the machine's folder, env included: unpack again when env is gone.
[ -f .devdeps/env ] || { [ -f .devdeps/unpack-deps.sh ] && bash .devdeps/unpack-deps.sh -q; }
[ -f .devdeps/env ] && source .devdeps/env
vf=${VOXFIT_BIN:-build-cuda/voxfit}
ts=$PWD/tests/volumes/totalsegmentator
work=${WORK:-/tmp/voxfit-work}
mkdir -p "$work"

# prepare_ct14 LOG [SPACING CACHE]: experiments/make-ct14-dataset.py, then `voxfit data prepare` at
# SPACING mm (default 1.5) into CACHE (default $work/cache). At 1.5 mm the CT is 60 voxels deep;
# 128^3 patches need 1.0 mm (90 voxels).
prepare_ct14() {
  [ -f "$work/ct14/dataset.json" ] || python3 experiments/make-ct14-dataset.py "$ts" "$work/ct14" >/dev/null || return 1
  "$vf" data prepare "$work/ct14/dataset.json" --output "${3:-$work/cache}" --spacing "${2:-1.5}" -q >"$1" 2>&1 ||
    { cat "$1"; return 1; }
}
