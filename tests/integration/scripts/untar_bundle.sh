#!/usr/bin/env bash
# untar_bundle.sh SRC: scripts/untar.sh unpacks a bundle archive as gpu-check.sh writes it
# (.tar.xz, and the older .tar.gz) to the same files and modes, with the xz program and,
# on a machine without it, through Python's tarfile; it refuses, with a message, what it
# cannot unpack. Prints FAIL: lines (ctest's FAIL_REGULAR_EXPRESSION) and exits 1 on any.
set -uo pipefail
src=$1
. "$src/scripts/untar.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# a bundle: an executable, a library, and the same 1 MiB twice (as the programs share kernels)
b=$work/orig/build-gpu-bundle
mkdir -p "$b/bin" "$b/lib"
head -c 1048576 /dev/urandom >"$b/bin/prog_a"
cp "$b/bin/prog_a" "$b/bin/prog_b"
chmod 755 "$b/bin/prog_a" "$b/bin/prog_b"
echo "lib" >"$b/lib/libx.so.0"
(cd "$work/orig" && tar -cf - build-gpu-bundle | xz -9 -T1 >"$work/bundle.tar.xz" &&
    tar -czf "$work/bundle.tar.gz" build-gpu-bundle) || fail "cannot make the archives"
xz_size=$(stat -c %s "$work/bundle.tar.xz")
[ "$xz_size" -lt 1572864 ] || fail "xz stored the repeated MiB twice ($xz_size bytes)"

# check NAME ARCHIVE [PATH]: unpack a copy of ARCHIVE under PATH and compare with the bundle
check() {
    local name=$1 archive=$2 path=${3:-$PATH} dir=$work/$1
    mkdir -p "$dir" && cp "$archive" "$dir/"
    local f
    f=$dir/$(basename "$archive")
    if ! (PATH=$path untar "$f"); then
        fail "$name: untar returned non-zero"
        return
    fi
    diff -r "$b" "$dir/build-gpu-bundle" >/dev/null || fail "$name: files differ"
    [ -x "$dir/build-gpu-bundle/bin/prog_a" ] || fail "$name: lost the executable bit"
    echo "ok: $name"
}

check xz "$work/bundle.tar.xz"
check gz "$work/bundle.tar.gz"

# a machine without xz: tar, dirname and a Python that is not a shell shim
nox=$work/noxz-bin
mkdir -p "$nox"
for c in tar dirname gzip; do ln -s "$(command -v "$c")" "$nox/$c"; done
py=$(python3 -c 'import sys; print(sys.executable)')
ln -s "$py" "$nox/python3"
check python "$work/bundle.tar.xz" "$nox"

# neither xz nor python3: a message and a non-zero status
bare=$work/bare-bin
mkdir -p "$bare" "$work/bare"
for c in tar dirname; do ln -s "$(command -v "$c")" "$bare/$c"; done
cp "$work/bundle.tar.xz" "$work/bare/"
msg=$( (PATH=$bare untar "$work/bare/bundle.tar.xz") 2>&1) && fail "bare: untar succeeded"
case $msg in *"neither xz nor python3"*) echo "ok: bare" ;; *) fail "bare: message was: $msg" ;; esac

# not an archive it knows
msg=$(untar "$work/bundle.zip" 2>&1) && fail "zip: untar succeeded"
case $msg in *"not a bundle archive"*) echo "ok: zip" ;; *) fail "zip: message was: $msg" ;; esac

[ "$fails" -eq 0 ] || exit 1
echo "untar_bundle: all passed"
