#!/usr/bin/env bash
# Installs everything voxfit needs. Idempotent: a second run checks and returns in seconds.
#   Debian 12/13, Ubuntu 22.04/24.04 (as root or with sudo): the packages below with apt.
#   LibTorch (tools/torch.sh says which): LIBTORCH=..., else python3's torch 2.x, else torch from
#   PyPI in the project's own virtual environment build-torch/venv (made here; about 4 GB).
#   A machine without apt (the GPU machine): the Debian builds of ITK/HDF5/Boost/GTest/json packed
#   by tools/pack-deps.sh (on a Debian 12 machine) into .devdeps/deps.tar.xz are unpacked instead.
#   Elsewhere it says what to install and exits 1.
#
#   tools/setup.sh [--print]   --print: say what would be installed here (the apt packages for this
#                              system and the LibTorch choice) and install nothing
#   VOXFIT_OS_RELEASE          the os-release file to read (default /etc/os-release)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tools/torch.sh
source tools/torch.sh

say() { echo "setup: $*" >&2; }
die() {
  echo "setup: ERROR: $*" >&2
  exit 1
}
print_only=0
case "${1:-}" in
--print) print_only=1 ;;
"") ;;
*)
  echo "usage: tools/setup.sh [--print]" >&2
  exit 2
  ;;
esac

# What voxfit needs besides LibTorch, for any system: the one-line answer where apt is not there.
NEEDS="a C++17 compiler, CMake >= 3.22, Ninja, ITK >= 5.2 (with its GDCM, NIfTI, Meta and NRRD IO),
HDF5 >= 1.10 (C and C++), Boost.Program_options >= 1.71, GoogleTest + GoogleMock, nlohmann-json >= 3.9,
zlib, gnuplot, python3 with venv and pip (for torch from PyPI), and for CUDA the CUDA toolkit (nvcc)"

os_release=${VOXFIT_OS_RELEASE:-/etc/os-release}
# os_field NAME: one field of the os-release file (in a subshell: the file is shell assignments).
# shellcheck source=/dev/null
os_field() { (. "$os_release" 2>/dev/null && eval "echo \"\${$1:-}\""); }
os_id=$(os_field ID)
os_version=$(os_field VERSION_ID)
os_name=$(os_field PRETTY_NAME)
os_name=${os_name:-this system (no $os_release)}

# The same package names on every supported release; the demo MRI comes from ITK's examples.
PKGS="build-essential cmake ninja-build pkg-config libinsighttoolkit5-dev libgdcm-tools libhdf5-dev
libboost-program-options-dev libgtest-dev libgmock-dev nlohmann-json3-dev zlib1g-dev gnuplot-nox
insighttoolkit5-examples python3 python3-venv"
# Optional: gloo's headers (CPU data-parallel training through Gloo; pip's torch ships none).
OPTIONAL_PKGS="libgloo-dev"
case "$os_id $os_version" in
"debian 12" | "debian 13" | "ubuntu 22.04" | "ubuntu 24.04") supported=1 ;;
*) supported=0 ;;
esac

resolve_torch || exit 1
[ "$TORCH_SOURCE" = debian ] && PKGS="$PKGS libtorch-dev"

if [ "$print_only" = 1 ]; then
  if [ "$supported" = 1 ]; then
    echo "system: $os_name (apt)"
    # shellcheck disable=SC2086
    echo "packages:" $PKGS
    # shellcheck disable=SC2086
    echo "optional:" $OPTIONAL_PKGS
  else
    echo "system: $os_name (not supported by this script)"
    echo "install by hand: $NEEDS" | tr '\n' ' '
    echo
  fi
  echo "torch: $TORCH_DESC"
  exit 0
fi

if [ "$supported" = 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  if [ -f .devdeps/deps.tar.xz ]; then
    say "no apt here: unpacking the carried Debian builds from .devdeps/"
    bash .devdeps/unpack-deps.sh -q
  else
    die "$os_name is not Debian 12/13 or Ubuntu 22.04/24.04 with apt: install $(echo "$NEEDS" | tr '\n' ' ')(or unpack a bundle from tools/pack-deps.sh into .devdeps/), then run this again"
  fi
else
  installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
  missing=""
  for p in $PKGS $OPTIONAL_PKGS; do
    installed "$p" || missing="$missing $p"
  done
  if [ -n "$missing" ] && [ -f .devdeps/deps.tar.xz ]; then
    # A carried bundle serves a machine whose apt reaches no archive (the GPU machine).
    say "missing:$missing; unpacking the carried Debian builds from .devdeps/ instead"
    bash .devdeps/unpack-deps.sh -q
  elif [ -n "$missing" ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    export DEBIAN_FRONTEND=noninteractive
    # Refresh the package lists only when they are missing or a day old.
    if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -1)" ]; then
      $SUDO apt-get update -qq
    fi
    # A package this release does not have: name them all in one line (optional ones are dropped).
    absent="" wanted=""
    for p in $missing; do
      if apt-cache show "$p" >/dev/null 2>&1; then
        wanted="$wanted $p"
      elif [[ " $OPTIONAL_PKGS " == *" $p "* ]]; then
        say "$p is not in $os_name's archive: data-parallel training on the CPU (Gloo) is left out"
      else
        absent="$absent $p"
      fi
    done
    [ -z "$absent" ] || die "$os_name's archive lacks:$absent (install their equivalents by hand)"
    if [ -n "$wanted" ]; then
      say "installing:$wanted"
      # shellcheck disable=SC2086
      $SUDO apt-get install -y -qq --no-install-recommends $wanted >/dev/null
    fi
  fi
fi

# LibTorch: the project venv is made (or brought to the pinned torch) only when it is the choice.
if [ "$TORCH_SOURCE" = venv ]; then
  stamp=$TORCH_VENV/.voxfit-torch-$VOXFIT_TORCH_VERSION
  if [ ! -f "$stamp" ]; then
    say "installing torch $VOXFIT_TORCH_VERSION from PyPI into $TORCH_VENV (about 4 GB; python3 has no torch 2.x)"
    if [ ! -x "$TORCH_VENV/bin/python" ]; then
      python3 -m venv "$TORCH_VENV" || die "python3 -m venv $TORCH_VENV failed (install python3-venv)"
    fi
    "$TORCH_VENV/bin/python" -m pip install -q --disable-pip-version-check "torch==$VOXFIT_TORCH_VERSION" ||
      die "pip install torch==$VOXFIT_TORCH_VERSION into $TORCH_VENV failed (is PyPI reachable?)"
    touch "$stamp"
  fi
fi
resolve_torch
if torch_is_cuda && [ -z "$(find_nvcc)" ]; then
  die "$TORCH_DESC is a CUDA build, whose CMake config needs the CUDA toolkit: install it (nvcc on PATH, CUDACXX, or /usr/local/cuda), or set LIBTORCH to a CPU LibTorch"
fi
say "ready: $TORCH_DESC"
