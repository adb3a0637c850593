#!/usr/bin/env bash
# cuda_lazy.sh DSRUN DSLAUNCH WORKDIR SRCDIR: a CUDA build's dsrun loads CUDA, cuBLAS and NCCL
# only when a rank opens a cuda device (kernels/cuda_module.h, docs/devices.md):
#  - neither dsrun nor dslaunch needs them (readelf -d), the module beside dsrun does;
#  - `dsrun run` of a script on cpu, sim and auto (no GPU here) maps none of them nor the
#    module (/proc/self/maps, read by the script itself);
#  - a dsrun copied without its module runs cpu scripts, and device = cuda names the module
#    it looked for and the loader's reason;
#  - a module built from other sources (its structures' sizes differ from dsrun's, or only
#    the hash of the headers both are compiled against) is
#    refused with a clear error, not called;
#  - with the CUDA libraries gone from the node (a tmpfs over their directories in a mount
#    namespace of its own), dsrun still runs a cpu script and `dsrun --blas`, and
#    device = cuda says which library the backend lacks;
#  - device = cuda on this machine without a GPU still ends with the "no usable GPU"
#    error, after loading the module (so the module resolves all it needs from dsrun).
set -euo pipefail
dsrun=$(realpath "$1") dslaunch=$(realpath "$2") work=$3 src=$4
rm -rf "$work" && mkdir -p "$work/alone" "$work/stale"
fail() { echo "FAIL: $*"; exit 1; }
module=$(dirname "$dsrun")/libds_cuda.so
[[ -f $module ]] || fail "no CUDA backend beside dsrun: $module"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)

cuda_libs='lib(cudart|cublas|cublasLt|nccl|cuda)\.so'
for prog in "$dsrun" "$dslaunch"; do
    if readelf -d "$prog" | grep NEEDED | grep -qE "$cuda_libs"; then
        fail "$(basename "$prog") links a CUDA library: $(readelf -d "$prog" | grep NEEDED | grep -E "$cuda_libs")"
    fi
done
for lib in libcudart libcublas libnccl; do
    readelf -d "$module" | grep NEEDED | grep -q "\[$lib\.so" || fail "the module does not link $lib"
done
echo "ok   dsrun and dslaunch link no CUDA library; libds_cuda.so links cudart, cuBLAS, NCCL"

cat >"$work/maps.lua" <<'EOF'
local mapped = {}
for line in io.lines('/proc/self/maps') do
  local lib = line:match('/(libcudart[^/]*)$') or line:match('/(libcublas[^/]*)$')
           or line:match('/(libnccl[^/]*)$') or line:match('/(libcuda%.so[^/]*)$')
           or line:match('/(libds_cuda%.so)$')
  if lib then mapped[lib] = true end
end
local names = {}
for k in pairs(mapped) do names[#names + 1] = k end
table.sort(names)
print('mapped: ' .. (#names > 0 and table.concat(names, ' ') or 'none'))
EOF
devices=(cpu sim)
[[ $ngpu -eq 0 ]] && devices+=(auto) # auto is cpu here; with a GPU it is cuda
for dev in "${devices[@]}"; do
    out=$(DS_ENGINE_DEVICE=$dev timeout 60 "$dsrun" run "$work/maps.lua" 2>&1) ||
        fail "device = $dev: dsrun run exited $?: $out"
    [[ $out == "mapped: none" ]] || fail "device = $dev: $out"
done
echo "ok   dsrun run on ${devices[*]} maps no CUDA library and not the module"

# cuda_fails WHAT DSRUN PATTERN: DSRUN on device = cuda exits 1 with PATTERN in its output,
# which goes to $out.
cuda_fails() {
    local what=$1 prog=$2 want=$3 rc
    set +e
    out=$(DS_ENGINE_DEVICE=cuda timeout 60 "$prog" run "$work/maps.lua" 2>&1)
    rc=$?
    set -e
    [[ $rc -eq 1 ]] || fail "device = cuda $what: exit $rc, expected 1: $out"
    grep -qE "$want" <<<"$out" || fail "device = cuda $what: no '$want' in: $out"
}

cp "$dsrun" "$work/alone/dsrun"
out=$(DS_ENGINE_DEVICE=cpu timeout 60 "$work/alone/dsrun" run "$work/maps.lua" 2>&1) ||
    fail "dsrun without its module, device = cpu: exit $?: $out"
cuda_fails "without the module" "$work/alone/dsrun" \
    "device cuda:0: cannot load the CUDA backend $work/alone/libds_cuda.so: .*No such file"
echo "ok   without its module: cpu runs, cuda says: $(grep -oE 'cannot load.*' <<<"$out" | cut -c1-160)"

# A module left from another build: what dsrun and it share has other sizes there.
cat >"$work/stale/module.c" <<'EOF'
#include "cuda_module.h"
static const ds_cuda_module STALE = {.abi = DS_CUDA_MODULE_ABI, .size = sizeof(ds_cuda_module),
                                     .layout = {.kernel_table = 8, .device_ops = 8, .device = 8,
                                                .err = 8}};
const ds_cuda_module *ds_cuda_module_entry(void) { return &STALE; }
EOF
cc -shared -fPIC -I"$src/kernels" -I"$src/common" -o "$work/stale/libds_cuda.so" \
    "$work/stale/module.c" || fail "cannot build the stale module"
cp "$dsrun" "$work/stale/dsrun"
cuda_fails "with a stale module" "$work/stale/dsrun" \
    "CUDA backend $work/stale/libds_cuda.so: built from other sources than this dsrun \(kernel table 8 bytes"
echo "ok   a stale module is refused: $(grep -oE 'built from.*' <<<"$out" | cut -c1-160)"

# ... and one whose structures kept their sizes but whose headers differ (a signature).
cat >"$work/stale/module.c" <<'EOF'
#include "cuda_module.h"
static const ds_cuda_module STALE = {.abi = DS_CUDA_MODULE_ABI, .size = sizeof(ds_cuda_module),
                                     .layout = DS_CUDA_LAYOUT, .interface = "0123456789abcdef"};
const ds_cuda_module *ds_cuda_module_entry(void) { return &STALE; }
EOF
cc -shared -fPIC -I"$src/kernels" -I"$src/common" -o "$work/stale/libds_cuda.so" \
    "$work/stale/module.c" || fail "cannot build the same-sized stale module"
cuda_fails "with a same-sized stale module" "$work/stale/dsrun" \
    "CUDA backend $work/stale/libds_cuda.so: built from other sources than this dsrun \(its interface headers hash to 0123456789abcdef, this dsrun's to [0-9a-f]{16}\)"
echo "ok   a same-sized stale module is refused: $(grep -oE 'built from.*' <<<"$out" | cut -c1-160)"

set +e
out=$(DS_ENGINE_DEVICE=cuda timeout 60 "$dsrun" run "$work/maps.lua" 2>&1)
rc=$?
set -e
if [[ $ngpu -eq 0 ]]; then
    [[ $rc -eq 1 ]] || fail "device = cuda without a GPU: exit $rc, expected 1: $out"
    grep -qE '\[engine\] device = cuda: device cuda:0: no usable GPU on this node: ' <<<"$out" ||
        fail "device = cuda without a GPU: $out"
    echo "ok   device = cuda without a GPU: $(grep -oE 'no usable GPU.*' <<<"$out" | cut -c1-160)"
else
    [[ $rc -eq 0 ]] || fail "device = cuda with $ngpu GPU(s): exit $rc: $out"
fi

# The node without CUDA: every directory a CUDA library of the module comes from, hidden.
if ! unshare -m true 2>/dev/null; then
    echo "SKIP the node without CUDA libraries: no mount namespace here (unshare -m)"
    exit 77
fi
dirs=$(ldd "$module" | awk '$1 ~ /^lib(cudart|cublas|cublasLt|nccl)\.so/ && $3 ~ /^\// {print $3}' |
    xargs -r -n1 realpath | xargs -r -n1 dirname | sort -u)
[[ -n $dirs ]] || fail "ldd finds no CUDA library of the module: $(ldd "$module")"
# Hiding a directory that also holds what dsrun itself needs (NCCL from the distribution,
# beside libc) would fail the runs for the wrong reason.
for lib in $(ldd "$dsrun" | awk '$3 ~ /^\// {print $3}' | xargs -r -n1 realpath); do
    if grep -qxF "$(dirname "$lib")" <<<"$dirs"; then
        echo "SKIP the node without CUDA libraries: $(dirname "$lib") holds dsrun's $(basename "$lib") too"
        exit 77
    fi
done
cat >"$work/hidden.sh" <<'EOF'
set -u
dsrun=$1 work=$2; shift 2
for d in "$@"; do mount -t tmpfs none "$d" || exit 3; done
DS_ENGINE_DEVICE=cpu "$dsrun" run "$work/maps.lua" >"$work/hidden-cpu.out" 2>&1; echo "cpu $?"
"$dsrun" --blas >"$work/hidden-blas.out" 2>&1; echo "blas $?"
DS_ENGINE_DEVICE=cuda "$dsrun" run "$work/maps.lua" >"$work/hidden-cuda.out" 2>&1; echo "cuda $?"
EOF
# shellcheck disable=SC2086 # one argument per directory
got=$(timeout 120 unshare -m bash "$work/hidden.sh" "$dsrun" "$work" $dirs | tr '\n' ' ')
[[ $got == "cpu 0 blas 0 cuda 1 " ]] ||
    fail "with $(echo $dirs) hidden: '$got': $(cat "$work"/hidden-*.out 2>/dev/null | tail -5)"
grep -qx 'mapped: none' "$work/hidden-cpu.out" || fail "hidden, cpu: $(cat "$work/hidden-cpu.out")"
want="cannot load the CUDA backend $module: lib[a-zA-Z]+\.so[.0-9]*: cannot open shared object file"
grep -qE "$want" "$work/hidden-cuda.out" || fail "hidden, cuda: no '$want' in: $(cat "$work/hidden-cuda.out")"
echo "ok   CUDA libraries hidden ($(echo $dirs)): cpu runs, cuda says: $(grep -oE 'cannot load.*' "$work/hidden-cuda.out" | cut -c1-160)"
echo "cuda lazy: ok"
