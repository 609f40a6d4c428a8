#!/usr/bin/env bash
# Builds the C library of herdless and installs it under a prefix, as cargo-c's `cinstall`
# would, by hand (docs/c.md says why):
#
#   $PREFIX/lib/libherdless.so.1.1.0      shared library, SONAME libherdless.so.1
#   $PREFIX/lib/libherdless.so.1 -> libherdless.so.1.1.0
#   $PREFIX/lib/libherdless.so   -> libherdless.so.1   (what -lherdless finds)
#   $PREFIX/lib/libherdless.a             static library: one prelinked object whose only
#                                         global symbols are herdless_* (Rust's std inside is
#                                         made local, so it cannot clash with another Rust
#                                         library's)
#   $PREFIX/include/herdless.h
#   $PREFIX/lib/pkgconfig/herdless.pc     for `pkg-config --cflags --libs herdless`
#   $PREFIX/lib/libherdless_preload.so    the preload library, for programs that cannot be
#                                         rebuilt: LD_PRELOAD=$PREFIX/lib/libherdless_preload.so
#                                         (docs/c.md, "Programs that cannot be rebuilt")
#
# Usage: capi/install.sh [--prefix DIR] [--libdir DIR] [--includedir DIR] [--destdir DIR]
#   --prefix      default /usr/local
#   --libdir      default PREFIX/lib
#   --includedir  default PREFIX/include
#   --destdir     staging root prepended to every path written (DESTDIR also works); the .pc
#                 file still names the final paths
# Linux (GNU binutils: ld, objcopy, ar, nm, beside the C compiler) only for now.
set -euo pipefail

prefix=/usr/local
libdir=
includedir=
destdir=${DESTDIR:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#*=}; shift ;;
    --libdir) libdir=$2; shift 2 ;;
    --libdir=*) libdir=${1#*=}; shift ;;
    --includedir) includedir=$2; shift 2 ;;
    --includedir=*) includedir=${1#*=}; shift ;;
    --destdir) destdir=$2; shift 2 ;;
    --destdir=*) destdir=${1#*=}; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
libdir=${libdir:-$prefix/lib}
includedir=${includedir:-$prefix/include}
case "$(uname -s)" in
  Linux) ;;
  *) echo "install.sh: only Linux is supported for now (found $(uname -s))" >&2; exit 2 ;;
esac
for tool in cargo ld objcopy ar nm; do
  command -v "$tool" >/dev/null || { echo "install.sh: $tool is needed" >&2; exit 2; }
done

cd "$(dirname "$0")/.."
# The library's name and versions. The SONAME's number is the ABI version: bump ABI_MAJOR on
# every incompatible change of include/herdless.h (while the crate is 0.x, cargo's minor
# versions may break anything; the SONAME says what actually broke).
name=herdless
abi_major=1
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' capi/Cargo.toml | head -n 1)
soname=lib$name.so.$abi_major
case "$version" in
  0.*) real=lib$name.so.$abi_major.${version#0.} ;;
  *) real=lib$name.so.$version ;;
esac
target_dir=${CARGO_TARGET_DIR:-$(cargo metadata --format-version 1 --no-deps \
  | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')}
out=$target_dir/release

# 1. Build: the shared library linked with its SONAME (a link argument of this build only, so
#    the plain `cargo build` keeps making libherdless_c.so for the build tree's own users), the
#    static one, and the system libraries a static link needs, as rustc reports them.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo rustc --release -p herdless-c --lib --crate-type cdylib,staticlib -- \
  -C "link-arg=-Wl,-soname,$soname" --print native-static-libs 2>&1 | tee "$log" >&2
native=$(sed -n 's/.*native-static-libs: //p' "$log" | tail -n 1)
# cargo replays no note when nothing was rebuilt: the list rustc gives on Linux with glibc.
native=${native:--lgcc_s -lutil -lrt -lpthread -lm -ldl -lc}
readelf -d "$out/libherdless_c.so" | grep -q "SONAME.*\[$soname\]" \
  || { echo "install.sh: $out/libherdless_c.so has no SONAME $soname" >&2; exit 1; }

# The preload library (capi/preload): a plain cdylib, no SONAME (nothing links against it).
cargo build --release -p herdless-preload >&2

# 2. The static library, prelinked: one relocatable object holding what the herdless_*
#    functions reach (ld -r --gc-sections from those roots), every other global symbol made
#    local, the LLVM bitcode and the COMDAT groups (whose signatures would otherwise discard
#    another Rust library's copies) taken out, unused symbols stripped.
work=$(mktemp -d)
trap 'rm -f "$log"; rm -rf "$work"' EXIT
nm -D --defined-only "$out/libherdless_c.so" | awk '$2 == "T" && $3 ~ /^herdless_/ { print $3 }' \
  | sort >"$work/exports"
[ -s "$work/exports" ] || { echo "install.sh: no herdless_* symbol exported" >&2; exit 1; }
ld -r --gc-sections $(sed 's/^/-u /' "$work/exports") -o "$work/whole.o" "$out/libherdless_c.a"
objcopy --remove-section=.llvmbc --remove-section=.llvmcmd --remove-section=.group \
  --keep-global-symbols="$work/exports" --strip-debug "$work/whole.o" "$work/local.o"
objcopy --strip-unneeded "$work/local.o" "$work/herdless.o"
globals=$(nm -g --defined-only "$work/herdless.o" | awk '{ print $3 }' | sort)
[ "$globals" = "$(cat "$work/exports")" ] \
  || { echo "install.sh: the prelinked object exports more than herdless_*" >&2; exit 1; }
rm -f "$work/lib$name.a"
ar rcs "$work/lib$name.a" "$work/herdless.o"

# 3. Install.
install -d "$destdir$libdir/pkgconfig" "$destdir$includedir"
install -m 755 "$out/libherdless_c.so" "$destdir$libdir/$real"
ln -sf "$real" "$destdir$libdir/$soname"
ln -sf "$soname" "$destdir$libdir/lib$name.so"
install -m 644 "$work/lib$name.a" "$destdir$libdir/lib$name.a"
install -m 644 include/herdless.h "$destdir$includedir/herdless.h"
install -m 755 "$out/libherdless_preload.so" "$destdir$libdir/libherdless_preload.so"
cat >"$destdir$libdir/pkgconfig/$name.pc" <<EOF
prefix=$prefix
libdir=$libdir
includedir=$includedir

Name: $name
Description: Exclusive, fair wake-ups for many processes or threads waiting on one shared descriptor (POLLEXCL / POLLONE)
Version: $version
Libs: -L\${libdir} -l$name
Libs.private: $native
Cflags: -I\${includedir}
EOF
echo "installed $name $version under $destdir$prefix: $libdir/$real (SONAME $soname), lib$name.a, $includedir/herdless.h, $libdir/pkgconfig/$name.pc, $libdir/libherdless_preload.so"
