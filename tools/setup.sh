#!/usr/bin/env bash
# Installs everything voxfit needs. Idempotent: a second run checks and returns in a second.
#   Debian 12 (as root or with sudo): the packages below from Debian's archive.
#   A CUDA LibTorch instead of Debian's CPU one: LIBTORCH=/path/to/libtorch (its share/cmake is
#   used) or VOXFIT_TORCH=python (python3's torch, through torch.utils.cmake_prefix_path); then
#   libtorch-dev is not installed.
#   A machine without apt (the GPU machine): the Debian builds of ITK/HDF5/Boost/GTest/json packed
#   by ../shared/device/pack-deps.sh into .devdeps/deps.tar.xz are unpacked instead.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "setup: $*" >&2; }

codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
if [ "$codename" != bookworm ] || ! command -v apt-get >/dev/null 2>&1; then
  if [ -f .devdeps/deps.tar.xz ]; then
    say "no apt here: unpacking the carried Debian builds from .devdeps/"
    bash .devdeps/unpack-deps.sh -q
    exit 0
  fi
  say "ERROR: not Debian 12 and no .devdeps/deps.tar.xz (run ../shared/device/pack-deps.sh on Debian 12)"
  exit 1
fi

PKGS="build-essential cmake ninja-build pkg-config libinsighttoolkit5-dev libgdcm-tools libhdf5-dev
libboost-program-options-dev libgtest-dev libgmock-dev nlohmann-json3-dev gnuplot-nox
insighttoolkit5-examples libgloo-dev"
if [ -z "${LIBTORCH:-}" ] && [ "${VOXFIT_TORCH:-debian}" != python ]; then
  PKGS="$PKGS libtorch-dev"
fi

missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -z "$missing" ]; then
  say "all packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
say "installing:$missing"
export DEBIAN_FRONTEND=noninteractive
# Refresh the package lists only when they are missing or a day old.
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -1)" ]; then
  $SUDO apt-get update -qq
fi
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
say "done"
