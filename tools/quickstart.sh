#!/usr/bin/env bash
# The main job on an embedded default: builds voxfit if needed, then shows what it sees and runs
# a short training smoke run. Results go to runs/quickstart/.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/build.sh
vf="$BUILD_DIR/voxfit"
out=runs/quickstart
mkdir -p "$out"
"$vf" info | tee "$out/info.txt"
"$vf" models | tee "$out/models.txt"
