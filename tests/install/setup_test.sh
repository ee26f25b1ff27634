#!/usr/bin/env bash
# tools/setup.sh on the systems GPU users run, without installing anything: for each fixture
# os-release, `setup.sh --print` says which apt packages it would install (the same names on
# Debian 12/13 and Ubuntu 22.04/24.04) and which LibTorch it would build against; any other system
# gets the list of what to install by hand and no message pointing outside the clone. Also checks
# the setup scripts parse (bash -n) and are shellcheck-clean where shellcheck is installed.
set -uo pipefail
src=$(cd "${1:?usage: setup_test.sh SOURCE_DIR}" && pwd)
cd "$src"
fixtures=tests/install/os-release
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
expect() { # expect NAME OUTPUT PATTERN: OUTPUT has a line matching PATTERN
  grep -qE -- "$3" <<<"$2" || fail "$1: no line matches '$3' in: $2"
}

for s in tools/setup.sh tools/build.sh tools/torch.sh tools/test.sh tools/quickstart.sh; do
  bash -n "$s" || fail "$s does not parse"
done
if command -v shellcheck >/dev/null 2>&1; then
  shellcheck -x tools/setup.sh tools/build.sh tools/torch.sh tools/test.sh tools/quickstart.sh .ci/run ||
    fail "shellcheck"
else
  echo "setup_test: shellcheck not installed; bash -n only"
fi

for os in debian-12 debian-13 ubuntu-22.04 ubuntu-24.04; do
  out=$(VOXFIT_OS_RELEASE=$fixtures/$os bash tools/setup.sh --print 2>&1) || fail "$os: exit $?"
  expect "$os" "$out" "^system: .*\(apt\)$"
  for p in build-essential cmake ninja-build libinsighttoolkit5-dev libhdf5-dev libboost-program-options-dev \
    libgtest-dev libgmock-dev nlohmann-json3-dev insighttoolkit5-examples python3-venv; do
    expect "$os" "$out" "^packages: (.* )?$p( |$)"
  done
  expect "$os" "$out" "^optional: libgloo-dev$"
  # LibTorch 2.x by default: never Debian's 1.13 unless asked for.
  grep -q "libtorch-dev" <<<"$out" && fail "$os: libtorch-dev in the default install: $out"
  expect "$os" "$out" "^torch: (python3's torch 2\.|torch [0-9.]+ from PyPI in build-torch/venv)"
done

out=$(VOXFIT_OS_RELEASE=$fixtures/ubuntu-24.04 VOXFIT_TORCH=debian bash tools/setup.sh --print 2>&1)
expect "VOXFIT_TORCH=debian" "$out" "^packages: .* libtorch-dev$"
out=$(VOXFIT_OS_RELEASE=$fixtures/ubuntu-24.04 VOXFIT_TORCH=venv bash tools/setup.sh --print 2>&1)
expect "VOXFIT_TORCH=venv" "$out" "^torch: torch 2\.[0-9.]+ from PyPI in build-torch/venv$"

out=$(VOXFIT_OS_RELEASE=$fixtures/fedora-41 bash tools/setup.sh --print 2>&1)
expect fedora "$out" "^system: Fedora Linux 41 .*not supported"
expect fedora "$out" "^install by hand: .*ITK >= 5\.2.*HDF5.*Boost\.Program_options.*GoogleTest.*nlohmann-json"
# Installing on it: one line, exit 1, nothing pointing outside the clone.
out=$(cd "$(mktemp -d)" && cp -r "$src/tools" . && VOXFIT_OS_RELEASE=$src/$fixtures/fedora-41 bash tools/setup.sh 2>&1)
rc=$?
[ "$rc" = 1 ] || fail "fedora install: exit $rc, expected 1: $out"
[ "$(wc -l <<<"$out")" = 1 ] || fail "fedora install: not one line: $out"
expect "fedora install" "$out" "^setup: ERROR: Fedora Linux 41 .* is not Debian 12/13 or Ubuntu 22.04/24.04"

out=$(LIBTORCH=/nonexistent/libtorch bash tools/setup.sh --print 2>&1)
rc=$?
[ "$rc" = 1 ] || fail "LIBTORCH=/nonexistent: exit $rc"
expect "LIBTORCH=/nonexistent" "$out" "^setup: ERROR: LIBTORCH=/nonexistent/libtorch has no share/cmake/Torch"

if grep -rn '\.\./shared' tools/setup.sh tools/build.sh tools/torch.sh tools/test.sh tools/quickstart.sh; then
  fail "a setup message points at ../shared"
fi

if [ "$fails" = 0 ]; then
  echo "setup_test: passed"
else
  echo "setup_test: $fails failure(s)"
  exit 1
fi
