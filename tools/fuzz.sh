#!/usr/bin/env bash
# Builds voxfit's libFuzzer targets with clang into build-fuzz/ (-DVOXFIT_FUZZ=ON, ASan + UBSan)
# and runs each for SECONDS (default 600), one after the other, from a seed corpus the build
# writes (fuzz_seeds; torchscript's are the test fixtures tests/models/scripted/*.ts and weights.pt).
# Findings go to build-fuzz/fuzz-out/TARGET/crash-* and the run's log to
# build-fuzz/fuzz-out/TARGET.log; the last lines print executions and findings per target.
#   tools/fuzz.sh [SECONDS] [TARGET...]     (targets: manifest nifti h5 ini torchscript)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(manifest nifti h5 ini torchscript)
build="build-fuzz"
jobs=${VOXFIT_FUZZ_BUILD_JOBS:-2}

# tools/build.sh configures (once, against the LibTorch it builds voxfit with) and builds, with clang.
CC=clang CXX=clang++ BUILD_DIR=$build VOXFIT_JOBS=$jobs VOXFIT_BUILD_TARGETS="fuzz_seeds ${targets[*]/#/fuzz_}" \
  VOXFIT_CMAKE_ARGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DVOXFIT_FUZZ=ON -DVOXFIT_BUILD_TESTS=OFF -DVOXFIT_PCH=OFF" \
  bash tools/build.sh

out=$build/fuzz-out
seeds=$out/seeds
mkdir -p "$out"
[ -d "$seeds/nifti" ] || "$build/fuzz/fuzz_seeds" "$seeds" >/dev/null
if [ ! -d "$seeds/torchscript" ]; then
  mkdir -p "$seeds/torchscript"
  cp tests/models/scripted/*.ts tests/models/scripted/weights.pt "$seeds/torchscript/"
fi

# detect_leaks=0: LibTorch, ITK and HDF5 keep process-wide caches (allocator pools, factory and
# type registries) that LeakSanitizer reports at exit and, with libFuzzer's per-input leak check,
# on the first inputs that touch them; they are not per-input leaks of voxfit.
# The readers allocate what a header declares only after checking it against the file, so a
# well-behaved input never needs more than a few hundred MiB; more is a finding.
# Fork mode with -ignore_*: a finding is saved and fuzzing goes on, so each target gets its whole
# SECONDS however early it finds something.
for t in "${targets[@]}"; do
  mkdir -p "$out/$t/corpus"
  echo "== fuzz_$t for ${seconds}s" >&2
  rc=0
  start=$(date +%s)
  ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
  "$build/fuzz/fuzz_$t" "$out/$t/corpus" "$seeds/$t" -max_total_time="$seconds" -timeout=60 \
    -rss_limit_mb=3072 -malloc_limit_mb=2048 -artifact_prefix="$out/$t/" -print_final_stats=1 \
    -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    >"$out/$t.log" 2>&1 || rc=$?
  elapsed=$(( $(date +%s) - start ))
  runs=$(grep -oE '^#[0-9]+' "$out/$t.log" | tail -1 | tr -d '#')
  findings=$(find "$out/$t" -maxdepth 1 \( -name 'crash-*' -o -name 'oom-*' -o -name 'timeout-*' -o -name 'leak-*' \) | wc -l)
  echo "fuzz_$t: ${runs:-?} executions in ${elapsed}s, exit ${rc}, findings ${findings} (log $out/$t.log)"
done
