#!/usr/bin/env bash
# pack-deps.sh -- run on the Debian 12 (bookworm) build machine.
#
# Packs the Debian builds of ITK 5.2 (+GDCM, FFTW), HDF5 1.10 (C/C++), Boost.Program_options 1.74,
# GoogleTest/GMock 1.12 and nlohmann_json 3.11 -- headers, shared libraries, static GTest libs and
# the packages' own CMake config files -- into ONE compressed tarball (default
# <repo>/.devdeps/deps.tar.xz). unpack-deps.sh installs it on a machine that has none of these
# packages (the GPU machine), so that plain find_package(ITK/HDF5/Boost/GTest/nlohmann_json) works.
#
# Layout inside the tarball (Debian's own paths, below a relocatable prefix):
#   usr/...          the packages' files; every absolute /usr path in the CMake/pkg-config files
#                    and in the h5cc/h5c++ wrappers is replaced by @DEVDEPS_PREFIX@/usr
#   sys/<soname>     common system libraries the above need at run time (zlib, curl, OpenSSL, ...);
#                    unpack-deps.sh uses them only where the target system lacks that soname
#                    (usr/lib/<arch>/libz.so & co. point to sys-link/<soname>, made at unpack time)
#   DEVDEPS_INFO     package versions, the list of files to patch, the list of sys/ libraries
# Not included: glibc, libstdc++, libgcc_s (the target's own are used; it needs glibc >= 2.36,
# GCC >= 12 runtime), DCMTK (no ITK library links it), ICU (only MINC IO needs it), GDCM tools/XML
# data, HDF5 static/Fortran libraries.
# Edits to Debian's files (all listed under [edits] in DEVDEPS_INFO): ITKDCMTK.cmake finds DCMTK
# QUIETly; h5cc/h5c++ default to the shared HDF5 and also search the bundle; one ITK header gets
# #include <cstdint> for GCC 13; import checks of executables that are not shipped are dropped.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: pack-deps.sh [options]
  -o, --output FILE    tarball to write (default: <git top-level of $PWD>/.devdeps/deps.tar.xz)
      --no-install     do not apt-get install missing packages (fail instead)
      --keep-stage DIR also leave the unpacked staging tree in DIR (for inspection)
      --fast           xz -6 instead of -9 (quicker, ~10% bigger)
  -h, --help
EOF
}

OUT=""; INSTALL=1; KEEP=""; XZLEVEL=-9
while [ $# -gt 0 ]; do
  case "$1" in
    -o|--output) OUT=$2; shift 2;;
    --no-install) INSTALL=0; shift;;
    --keep-stage) KEEP=$2; shift 2;;
    --fast) XZLEVEL=-6; shift;;
    -h|--help) usage; exit 0;;
    *) echo "pack-deps: unknown argument $1" >&2; usage >&2; exit 2;;
  esac
done
if [ -z "$OUT" ]; then
  top=$(git rev-parse --show-toplevel 2>/dev/null || pwd)
  OUT="$top/.devdeps/deps.tar.xz"
fi
ARCH=x86_64-linux-gnu
say() { echo "pack-deps: $*" >&2; }
die() { echo "pack-deps: ERROR: $*" >&2; exit 1; }

# ---------------------------------------------------------------- 1. packages
PKGS="libinsighttoolkit5-dev libhdf5-dev hdf5-helpers libboost-program-options-dev libgtest-dev libgmock-dev nlohmann-json3-dev libfftw3-dev"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
  [ "$INSTALL" = 1 ] || die "missing packages:$missing"
  [ "$(id -u)" = 0 ] || die "missing packages:$missing (run as root or install them)"
  say "installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  # shellcheck disable=SC2086
  apt-get install -y --no-install-recommends $missing >/dev/null ||
    { apt-get update >/dev/null && apt-get install -y --no-install-recommends $missing >/dev/null; } ||
    die "apt-get install failed"
fi
for t in readelf perl xz tar ldconfig g++; do
  command -v "$t" >/dev/null 2>&1 || [ -x "/sbin/$t" ] || die "needs $t"
done
LDCONFIG=$(command -v ldconfig || echo /sbin/ldconfig)

WORK=$(mktemp -d -t devdeps-pack.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
S="$WORK/stage"          # becomes the tarball's root
mkdir -p "$S/usr" "$S/sys"
LIST="$WORK/files.txt"; : > "$LIST"

# add the files of a package, minus docs and an optional exclude regex (extended)
add_pkg() {
  local pkg=$1 ex=${2:-}
  dpkg -L "$pkg" | while IFS= read -r f; do
    case "$f" in /usr/share/doc/*|/usr/share/lintian/*|/usr/share/man/*|/.) continue;; esac
    [ -d "$f" ] && [ ! -L "$f" ] && continue
    [ -n "$ex" ] && printf '%s\n' "$f" | grep -Eq "$ex" && continue
    [ -e "$f" ] || [ -L "$f" ] || continue
    printf '%s\n' "${f#/}"
  done >> "$LIST"
}
add_glob() { local f; for f in "$@"; do [ -e "$f" ] || [ -L "$f" ] && printf '%s\n' "${f#/}"; done >> "$LIST"; return 0; }

# ITK (everything Debian ships: ~90 libraries, headers, CMake package)
add_pkg libinsighttoolkit5.2
add_pkg libinsighttoolkit5-dev
# GDCM: libraries, headers, CMake package (without the VTK/Python parts and the XML resources)
add_pkg libgdcm3.0 '^/usr/share/gdcm'
add_pkg libgdcm-dev 'vtkgdcm|GDCM-vtk|/GDCM-targets'
# HDF5 serial C/C++/HL shared libs + headers + h5cc/h5c++ wrappers (FindHDF5 runs them)
for p in libhdf5-103-1 libhdf5-cpp-103-1 libhdf5-hl-100 libhdf5-hl-cpp-100; do add_pkg "$p"; done
add_pkg libhdf5-dev '\.a$|fortran|\.mod$|/usr/include/hdf5/serial/.*\.mod'
add_pkg hdf5-helpers 'h5fc'
# Boost: program_options (shared + static) and Boost's CMake package files
add_pkg libboost-program-options1.74.0
add_pkg libboost-program-options1.74-dev
add_glob /usr/lib/$ARCH/cmake/Boost-1.74.0/* /usr/lib/$ARCH/cmake/boost_headers-1.74.0/* \
         /usr/lib/$ARCH/cmake/BoostDetectToolset-1.74.0.cmake
# GoogleTest / GMock (static libs, headers, CMake package; not the sources)
add_pkg libgtest-dev '^/usr/src/'
add_pkg libgmock-dev '^/usr/src/'
# nlohmann_json (header-only)
add_pkg nlohmann-json3-dev
# gloo's headers (c10d's ProcessGroupGloo includes them; pip's torch ships none), if installed
dpkg-query -W libgloo-dev >/dev/null 2>&1 && add_pkg libgloo-dev '\.a$|\.so|/cmake/'
# MINC CMake package (ITKMINC module asks for it), if installed
dpkg-query -W libminc-dev >/dev/null 2>&1 && add_pkg libminc-dev
# headers that ITK's public headers include from the system (itk_zlib.h, gifti_io.h, itk_png.h,
# itk_jpeg.h, itkFFTWCommon.h)
add_glob /usr/include/zlib.h /usr/include/zconf.h /usr/include/expat.h /usr/include/expat_external.h \
         /usr/include/png.h /usr/include/pngconf.h /usr/include/pnglibconf.h /usr/include/libpng16/* \
         /usr/include/jpeglib.h /usr/include/jerror.h /usr/include/jmorecfg.h /usr/include/$ARCH/jconfig.h \
         /usr/include/fftw3.h

# Boost headers: whole sub-libraries reached from program_options and a few common header-only
# libraries (algorithm/string, optional, tokenizer, format, lexical_cast, any, variant), in any -std.
BTU="$WORK/boost_tu.cpp"
cat > "$BTU" <<'EOF'
#include <boost/program_options.hpp>
#include <boost/algorithm/string.hpp>
#include <boost/optional.hpp>
#include <boost/tokenizer.hpp>
#include <boost/format.hpp>
#include <boost/lexical_cast.hpp>
#include <boost/any.hpp>
#include <boost/variant.hpp>
EOF
for std in c++14 c++17 c++20 c++2b; do for extra in "" "-DNDEBUG -O2" "-pthread"; do
  # shellcheck disable=SC2086
  g++ -std=$std $extra -x c++ -M "$BTU" 2>/dev/null || true
done; done | tr ' \\' '\n\n' | grep '^/usr/include/boost/' | sort -u > "$WORK/boost_closure.txt"
[ -s "$WORK/boost_closure.txt" ] || die "could not compute the Boost header closure"
{
  # whole directories of the sub-libraries touched, except the big ones where only the files reached are kept
  sed 's#^/usr/include/boost/##' "$WORK/boost_closure.txt" | awk -F/ 'NF>1{print $1}' | sort -u |
    grep -Ev '^(math|numeric|container|system|filesystem)$' |
    while read -r d; do find "/usr/include/boost/$d" \( -type f -o -type l \); done
  ls /usr/include/boost/*.hpp
  cat "$WORK/boost_closure.txt"
  find /usr/include/boost/numeric/conversion -type f
} | sed 's#^/##' | sort -u >> "$LIST"

sort -u "$LIST" -o "$LIST"
tar -C / --no-recursion -cf - -T "$LIST" | tar -C "$S" -xf -

# ---------------------------------------------------------------- 2. shared-library closure
# CORE: the libraries' own stack -> copied next to Debian's location, always used.
# SYS : common system libraries -> sys/<soname>, used only where the target lacks the soname.
CORE_PKG_RE='^(libinsighttoolkit|libgdcm|libhdf5|libboost|libaec|libsz|libcharls|libopenjp2|libminc|libnetcdf|libfftw3|libnifti|libdcmtk)'
# never bundled: the C/C++ runtime of the target
SKIP_RE='^(ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libmvec\.so\.1|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libresolv\.so\.2|libutil\.so\.1|libanl\.so\.1|libstdc\+\+\.so\.6|libgcc_s\.so\.1)$'
declare -A SYSPATH
while read -r so path; do [ -z "${SYSPATH[$so]:-}" ] && SYSPATH[$so]=$path; done < <(
  "$LDCONFIG" -p | awk '/x86-64/ && $NF ~ /^\// {print $1, $NF}')

pkg_of() {   # package owning a file (handles the /lib -> /usr/lib merge)
  local f=$1 r
  r=$(dpkg -S "$f" 2>/dev/null | head -1 | cut -d: -f1) && [ -n "$r" ] && { echo "$r"; return; }
  case "$f" in /usr/lib/*) f=${f#/usr};; /lib/*) f=/usr$f;; esac
  dpkg -S "$f" 2>/dev/null | head -1 | cut -d: -f1 || true
}
# left out on purpose: ICU 72 (7.5 MB xz) -- only the bundled libxml2 needs it, and that only for
# netCDF -> MINC image IO, and only on a machine without its own libxml2.so.2
OMIT_RE='^libicu(data|uc|i18n)\.so'
provided() {  # is this soname already in the stage (or deliberately left out)?
  [ -e "$S/usr/lib/$1" ] || [ -e "$S/usr/lib/$ARCH/$1" ] || [ -e "$S/sys/$1" ] ||
    [ -e "$S/usr/lib/$ARCH/hdf5/serial/$1" ] || printf '%s\n' "$1" | grep -Eq "$OMIT_RE"
}
add_soname() {
  local so=$1 p real pkg
  p=${SYSPATH[$so]:-}
  [ -n "$p" ] || { say "WARNING: $so is needed but not found on this machine"; return 0; }
  real=$(readlink -f "$p")
  pkg=$(pkg_of "$real"); [ -n "$pkg" ] || pkg=$(pkg_of "$p")
  if printf '%s\n' "$pkg" | grep -Eq "$CORE_PKG_RE"; then
    cp -L "$real" "$S/usr/lib/$ARCH/$(basename "$real")"
    [ "$(basename "$real")" = "$so" ] || ln -sf "$(basename "$real")" "$S/usr/lib/$ARCH/$so"
    echo "core $so ($pkg)" >> "$WORK/closure.log"
  else
    cp -L "$real" "$S/sys/$so"
    echo "sys  $so ($pkg)" >> "$WORK/closure.log"
  fi
}
elf_files() {
  find "$S/usr/lib" "$S/sys" "$S/usr/bin" -type f \( -name '*.so*' -o -path '*/sys/*' -o -path '*/bin/*' \) 2>/dev/null |
    while IFS= read -r f; do head -c4 "$f" | grep -q 'ELF' && printf '%s\n' "$f"; done
}
: > "$WORK/closure.log"
for round in 1 2 3 4 5 6 7 8; do
  added=0
  while read -r so; do
    printf '%s\n' "$so" | grep -Eq "$SKIP_RE" && continue
    provided "$so" && continue
    add_soname "$so"; added=1
  done < <(elf_files | xargs -r readelf -d 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u)
  [ $added = 0 ] && break
done

# ---------------------------------------------------------------- 3. link-time .so names
# libraries that the CMake files / h5cc name as /usr/lib/<arch>/libX.so, libX.so or -lX
{
  grep -rhoE "/usr/lib/$ARCH/lib[A-Za-z0-9_+.-]+\.so\b" "$S/usr/lib" --include='*.cmake' || true
  grep -rhoP '(?<=[";\s])lib[\w+-]+\.so(?=[";\s]|$)' "$S/usr/lib" --include='*.cmake' || true
  for w in h5cc h5c++; do "/usr/bin/$w" -show 2>/dev/null | tr ' ' '\n' | sed -n 's/^-l\(.*\)/lib\1.so/p'; done
} | sed 's#.*/##' | sort -u > "$WORK/devlinks.txt"
DEVDIR="$S/usr/lib/$ARCH"
while read -r dl; do
  case "$dl" in libc.so|libm.so|libdl.so|libpthread.so|librt.so|libstdc++.so) continue;; esac
  [ -e "$DEVDIR/$dl" ] && continue
  # prefer the soname the bundled libraries use (libcurl.so -> libcurl.so.4, as libhdf5 needs),
  # else whatever this machine's -dev symlink points to (libpng.so -> libpng16.so.16)
  so=$(cd "$DEVDIR" && ls -1 "$dl".* 2>/dev/null | awk '{print length, $0}' | sort -n | head -1 | cut -d' ' -f2) || true
  [ -n "$so" ] || so=$(cd "$S/sys" && ls -1 "$dl".* 2>/dev/null | awk '{print length, $0}' | sort -n | head -1 | cut -d' ' -f2) || true
  [ -n "$so" ] || so=${SYSPATH[$dl.1]:+$dl.1}
  if [ -z "$so" ] && [ -e "/usr/lib/$ARCH/$dl" ]; then
    so=$(readelf -d "$(readlink -f "/usr/lib/$ARCH/$dl")" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  fi
  [ -n "$so" ] || { say "WARNING: no library for link name $dl"; continue; }
  provided "$so" || add_soname "$so"
  if [ -e "$DEVDIR/$so" ]; then ln -s "$so" "$DEVDIR/$dl"
  elif [ -e "$S/sys/$so" ]; then ln -s "../../../sys-link/$so" "$DEVDIR/$dl"   # made by unpack-deps.sh
  else say "WARNING: could not provide $dl ($so)"; fi
done < "$WORK/devlinks.txt"
# libs pulled in by the dev links may need more of the closure
for round in 1 2 3 4; do
  added=0
  while read -r so; do
    printf '%s\n' "$so" | grep -Eq "$SKIP_RE" && continue
    provided "$so" && continue
    add_soname "$so"; added=1
  done < <(elf_files | xargs -r readelf -d 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u)
  [ $added = 0 ] && break
done

# ---------------------------------------------------------------- 4. fix-ups
# absolute symlinks -> relative (the tree is relocated)
find "$S" -type l | while IFS= read -r l; do
  t=$(readlink "$l")
  case "$t" in /*) [ -e "$S$t" ] || [ -L "$S$t" ] && ln -sfn "$(realpath -s --relative-to="$(dirname "$l")" "$S$t")" "$l";; esac
done
# drop dangling symlinks (e.g. to the static/Fortran HDF5 libs we leave out), except the link-time
# names of system libraries: they point into sys-link/, which unpack-deps.sh fills on the target
# (-> the target's own copy of that soname if it has one, else the bundled copy in sys/)
find "$S" -xtype l ! -lname '*sys-link/*' -print -delete | sed "s#^$S/#  dropped dangling link #" >&2 || true
# CMake import checks of executables we do not ship (gdcmdump & co.) only print noise: drop them
find "$S/usr/lib" -name '*argets-*.cmake' > "$WORK/targets.txt"
while IFS= read -r f; do
  { grep -oE '_(import_check_files_for|IMPORT_CHECK_FILES_FOR)_[A-Za-z0-9_+-]+ "[$][{]_IMPORT_PREFIX[}]/bin/[^"]+"' "$f" || true; } |
    sed 's#.*/bin/\([^"]*\)"#\1#' | sort -u > "$WORK/exes.txt"
  while read -r exe; do
    [ -e "$S/usr/bin/$exe" ] && continue
    sed -i "\#_\(import_check_files_for\|IMPORT_CHECK_FILES_FOR\)_[A-Za-z0-9_+-]* \"\${_IMPORT_PREFIX}/bin/$exe\"#d" "$f"
  done < "$WORK/exes.txt"
done < "$WORK/targets.txt"

# ITKConfig.cmake loads *every* enabled module file, and ITKDCMTK.cmake insists on DCMTK's CMake
# package. No ITK library links DCMTK, so rather than shipping DCMTK (~6 MB) that lookup is made
# optional: only a project asking for the ITKDCMTK module itself would miss it.
f="$S/usr/lib/cmake/ITK-5.2/Modules/ITKDCMTK.cmake"
if [ -f "$f" ] && grep -q 'find_package(DCMTK REQUIRED NO_MODULE)' "$f"; then
  sed -i 's/find_package(DCMTK REQUIRED NO_MODULE)/find_package(DCMTK QUIET NO_MODULE)  # devdeps: DCMTK not bundled/' "$f"
  echo "ITKDCMTK.cmake: find_package(DCMTK REQUIRED) -> QUIET (DCMTK is not bundled)" >> "$WORK/patches.log"
fi

# GCC >= 13 (the GPU machine's compiler) no longer pulls <cstdint> in through other standard headers;
# ITK 5.2's headers, compiled one by one with g++-13, fail only here (fixed in later ITK releases)
for h in itkMathematicalMorphologyEnums.h; do
  f="$S/usr/include/ITK-5.2/$h"
  [ -f "$f" ] && ! grep -q '#include <cstdint>' "$f" || continue
  sed -i '0,/^#include /s//#include <cstdint> \/\/ devdeps: needed with GCC >= 13\n&/' "$f"
  grep -q '^#include <cstdint>' "$f" || die "could not patch $h"
  echo "$h: #include <cstdint> added (GCC 13)" >> "$WORK/patches.log"
done
# jpeglib.h includes "jconfig.h" from its own directory first; Debian keeps it in the multiarch dir
[ -f "$S/usr/include/$ARCH/jconfig.h" ] && cp "$S/usr/include/$ARCH/jconfig.h" "$S/usr/include/jconfig.h"

# FindHDF5 compiles+links a test program with h5cc/h5c++. Debian's wrappers link the static HDF5
# libraries by default (not bundled) and take -lcurl/-lcrypto/-lsz/-lz from the system's -dev
# packages: make them link the shared HDF5 and search the bundle's library directory too.
for w in h5cc h5c++; do
  f="$S/usr/bin/$w"
  [ -f "$f" ] || continue
  sed -i -e 's/USE_SHARED_LIB="${HDF5_USE_SHLIB:-no}"/USE_SHARED_LIB="${HDF5_USE_SHLIB:-yes}"/' \
         -e "s#^H5BLD_LDFLAGS=\" \"#H5BLD_LDFLAGS=\" -L@DEVDEPS_PREFIX@/usr/lib/$ARCH \"#" "$f"
  # compiler: gcc/g++ as in Debian, else whatever cc/c++ is (HDF5_CC / HDF5_CXX still override)
  sed -i -e 's/^CCBASE="gcc"$/CCBASE="$(command -v gcc >\/dev\/null 2>\&1 \&\& echo gcc || echo cc)"/' \
         -e 's/^CLINKERBASE="gcc"$/CLINKERBASE="$CCBASE"/' \
         -e 's/^CXXBASE="g++"$/CXXBASE="$(command -v g++ >\/dev\/null 2>\&1 \&\& echo g++ || echo c++)"/' \
         -e 's/^CXXLINKERBASE="g++"$/CXXLINKERBASE="$CXXBASE"/' "$f"
  grep -q '^H5BLD_LDFLAGS=" -L@DEVDEPS_PREFIX@/usr/lib' "$f" && grep -q 'HDF5_USE_SHLIB:-yes' "$f" &&
    grep -q 'LINKERBASE="\$C' "$f" || die "could not adapt $w (Debian changed it?)"
  echo "$w: shared HDF5 by default, -L<prefix>/usr/lib/$ARCH added, gcc/g++ else cc/c++" >> "$WORK/patches.log"
done

# ---------------------------------------------------------------- 5. /usr -> @DEVDEPS_PREFIX@/usr
PATCH="$WORK/patch_files.txt"
( cd "$S" && find usr \( -name '*.cmake' -o -name '*.pc' -o -name '*.settings' -o -path 'usr/bin/h5cc' -o -path 'usr/bin/h5c++' \) -type f ) |
  sort > "$WORK/cand.txt"
: > "$PATCH"
while IFS= read -r f; do
  grep -q '/usr' "$S/$f" || continue
  perl -pi -e 's{(?:(?<![\w.@/+-])|(?<=-[IL]))/usr(?=[/"'"'"';:\s)]|$)}{\@DEVDEPS_PREFIX\@/usr}g' "$S/$f"
  grep -q '@DEVDEPS_PREFIX@' "$S/$f" && printf '%s\n' "$f" >> "$PATCH"
done < "$WORK/cand.txt"
# report absolute paths in the CMake files that do not exist in the bundle (information only)
grep -rhoE '@DEVDEPS_PREFIX@/usr/[^";[:space:])>]*' "$S/usr" --include='*.cmake' | sort -u |
  while read -r p; do r="$S/${p#@DEVDEPS_PREFIX@/}"; [ -e "$r" ] || [ -L "$r" ] || echo "  (not bundled) ${p#@DEVDEPS_PREFIX@}"; done \
  > "$WORK/unresolved.txt" || true

# ---------------------------------------------------------------- 6. manifest + tarball
{
  echo "# devdeps bundle made by pack-deps.sh"
  echo "created: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME") $(uname -m)"
  echo "glibc-built-against: $(ldd --version | head -1 | awk '{print $NF}')"
  echo "[packages]"
  dpkg-query -W -f='${Package} ${Version}\n' $PKGS libinsighttoolkit5.2 libgdcm3.0 libgdcm-dev libhdf5-103-1 \
    libhdf5-cpp-103-1 libboost-program-options1.74.0 libboost1.74-dev googletest 2>/dev/null | sort -u
  echo "[patch]"; cat "$PATCH"
  echo "[sys]"; (cd "$S/sys" && ls -1)
  echo "[edits]"; cat "$WORK/patches.log" 2>/dev/null || true
  echo "  *Targets-*.cmake: import checks of executables that are not bundled removed"
  echo "[closure]"; sort "$WORK/closure.log"
  echo "[omitted]"; echo "libicudata.so.72 libicuuc.so.72 (needed only by sys/libxml2.so.2 -> libnetcdf -> ITKIOMINC)"
  echo "[unresolved-paths-in-cmake-files]"; cat "$WORK/unresolved.txt"
} > "$S/DEVDEPS_INFO"
cat "$S/DEVDEPS_INFO" > "$WORK/info.txt"

mkdir -p "$(dirname "$OUT")"
say "compressing $(du -sh "$S" | cut -f1) ..."
tar -C "$S" --sort=name --owner=0 --group=0 --numeric-owner --mtime='2023-01-01 00:00:00' \
    -cf - DEVDEPS_INFO usr sys | xz $XZLEVEL -T0 > "$OUT.tmp"
mv -f "$OUT.tmp" "$OUT"
# The installer travels beside the tarball (a machine without apt runs .devdeps/unpack-deps.sh)
cp -f "$(dirname "${BASH_SOURCE[0]}")/unpack-deps.sh" "$(dirname "$OUT")/unpack-deps.sh"
if [ -n "$KEEP" ]; then rm -rf "$KEEP"; mkdir -p "$(dirname "$KEEP")"; cp -a "$S" "$KEEP"; fi
say "unresolved absolute paths (harmless unless you use them): $(wc -l < "$WORK/unresolved.txt")"
say "core libs: $(grep -c '^core' "$WORK/closure.log" || true) added, sys libs: $(ls "$S/sys" | wc -l)"
say "wrote $OUT ($(du -h "$OUT" | cut -f1), $(stat -c %s "$OUT") bytes)"
