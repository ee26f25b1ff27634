#!/usr/bin/env bash
# The installed tool (issue 31): `cmake --install` of the current build into a fresh prefix, and
# that prefix's voxfit reads its data from <prefix>/share/voxfit, not from the source tree.
#   install_test.sh CMAKE BUILD_DIR SOURCE_DIR      (run by CTest: tests/CMakeLists.txt)
set -euo pipefail
cmake=$1 build=$2 src=$3
fail() { echo "install_test: $*" >&2; exit 1; }

prefix=$(mktemp -d "${TMPDIR:-/tmp}/voxfit_install.XXXXXX")
trap 'rm -rf "$prefix"' EXIT
prefix=$(cd "$prefix" && pwd -P) # the binary reports its data through /proc/self/exe, a real path
"$cmake" --install "$build" --prefix "$prefix" >/dev/null
vf="$prefix/bin/voxfit"
share="$prefix/share/voxfit"
[ -x "$vf" ] || fail "$vf: not installed"
[ -f "$share/cards.csv" ] || fail "$share/cards.csv: not installed"
[ -f "$share/reference/autodl_seed.csv" ] || fail "$share/reference/autodl_seed.csv: not installed"

unset VOXFIT_DATA_DIR
data_line() { "$@" info | sed -n 's/^  data  *//p'; }
data=$(data_line "$vf")
[ "$data" = "$share" ] || fail "voxfit info says data: '$data', expected the prefix's $share"
case "$data" in "$src"*) fail "data dir $data is in the source tree" ;; esac

# A card only the installed table has: `cards list` must read the prefix's copy.
sed -n 2p "$share/cards.csv" | sed 's/^[^,]*,[^,]*,/installcheck,Install Check Card,/' >>"$share/cards.csv"
out=$("$vf" cards list) || fail "voxfit cards list failed"
grep -q "Install Check Card" <<<"$out" || fail "cards list did not read $share/cards.csv:
$out"

# The environment wins; without an installed cards.csv the binary falls back to the source tree.
data=$(VOXFIT_DATA_DIR=/elsewhere data_line "$vf")
[ "$data" = /elsewhere ] || fail "VOXFIT_DATA_DIR=/elsewhere: voxfit info says data: '$data'"
rm "$share/cards.csv"
data=$(data_line "$vf")
[ "$data" = "$src/data" ] || fail "without $share/cards.csv: data: '$data', expected $src/data"
echo "install_test: $vf reads $share"
