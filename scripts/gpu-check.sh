#!/usr/bin/env bash
# gpu-check.sh: the CUDA kernels' tests (tests/gpu, ctest label "gpu") and the GPU
# benchmark (bench/gpu) on a machine with an NVIDIA GPU, each run under a time bound.
#
#   scripts/gpu-check.sh [BUILD_DIR]        build here and run here (a GPU machine with the
#                                           project's build dependencies; default build-gpu)
#   scripts/gpu-check.sh bundle [DIR]       build here (no GPU needed) and put the test and
#                                           benchmark programs, plus the non-CUDA shared
#                                           libraries they load (OpenBLAS, libgomp), in DIR
#                                           (default build-gpu-bundle, about 210 MB) and in
#                                           DIR.tar.xz (about 10 MB: carry this one)
#   scripts/gpu-check.sh run DIR            run a bundle (DIR or DIR.tar.xz) on a GPU
#                                           machine that has the CUDA 13
#                                           runtime and cuBLAS but not this project's deps;
#                                           if the bundled programs do not load there (other
#                                           system libraries) or GPU_CHECK_REBUILD=1, they
#                                           are rebuilt there with nvcc and gcc alone, from
#                                           the sources and the bundle's OpenBLAS
#   scripts/gpu-check.sh rebuild DIR        only that rebuild (tests/gpu/run.sh uses it)
#   GPU_CHECK_BUILD_DIR=build scripts/gpu-check.sh bundle   the bundle from an existing
#                                           CUDA build instead of build-gpu
#
# tests/gpu/run.sh is the whole GPU check in one go (these tests, the NCCL test, a GPT on
# cuda against cpu through dsrun, bench/gpu/bench_gpt.sh) for a lent GPU; the bundle
# carries dsrun for it.
# Environment: GPU_CHECK_TEST_TIMEOUT (s per test program, default 90),
# GPU_CHECK_BENCH_TIMEOUT (s, default 150; all together stay under 9 minutes), GPU_CHECK_BENCH_ARGS (default "--B 8 --T 1024").
# When OUT is set (the device tool's result folder) the log is also written to
# $OUT/gpu-check.log. Exit status: 0 when every test passed, 1 otherwise, 2 on no device.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. scripts/untar.sh
ROOT=$PWD
TEST_TIMEOUT=${GPU_CHECK_TEST_TIMEOUT:-90}
BENCH_TIMEOUT=${GPU_CHECK_BENCH_TIMEOUT:-150}
BENCH_ARGS=${GPU_CHECK_BENCH_ARGS:---B 8 --T 1024}
TARGETS=(test_gpu_dense test_gpu_attention test_gpu_loss test_gpu_optim test_gpu_device test_gpu_table test_gpu_write bench_gpu dsrun ds_cuda_module zero_bench)
OPTIONAL_TARGETS=(test_comm_nccl) # the NCCL backend's test (runtime/comm), also labelled gpu

if [ -n "${OUT:-}" ] && [ -d "${OUT}" ]; then
    exec > >(tee "$OUT/gpu-check.log") 2>&1
fi

say() { printf '== %s\n' "$*"; }

build() { # build DIR
    local dir=$1
    say "configure and build ${TARGETS[*]} in $dir"
    mkdir -p "$dir"
    cmake -S "$ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=Release >"$dir/gpu-check-configure.log" 2>&1 ||
        { cat "$dir/gpu-check-configure.log"; echo "configure failed"; exit 1; }
    grep -q 'CUDA kernels ON' "$dir/gpu-check-configure.log" ||
        { echo "nvcc not found: the CUDA kernels are not built"; exit 1; }
    cmake --build "$dir" -j "${GPU_CHECK_JOBS:-$(nproc)}" --target "${TARGETS[@]}" || exit 1
    local t
    for t in "${OPTIONAL_TARGETS[@]}"; do
        cmake --build "$dir" -j "${GPU_CHECK_JOBS:-$(nproc)}" --target "$t" >"$dir/gpu-check-$t.log" 2>&1 ||
            echo "-- optional $t did not build (see $dir/gpu-check-$t.log); going on without it"
    done
}

# run_tests BIN_DIR: every test_gpu_* program; 0 = pass, 77 = skipped (no device)
run_tests() {
    local bin=$1 failed=0 skipped=0 passed=0 unstarted=""
    for t in "$bin"/test_*; do
        [ -x "$t" ] || continue
        local name start rc
        name=$(basename "$t")
        say "$name (timeout ${TEST_TIMEOUT}s)"
        start=$(date +%s%N)
        timeout "$TEST_TIMEOUT" "$t"
        rc=$?
        echo "-- $name: exit $rc in $((($(date +%s%N) - start) / 1000000)) ms"
        case $rc in
        0) passed=$((passed + 1)) ;;
        77) skipped=$((skipped + 1)) ;;
        124) echo "-- $name: TIMED OUT"; failed=$((failed + 1)) ;;
        127) unstarted="$unstarted $name" ;; # a library it needs is not on this machine
        *) failed=$((failed + 1)) ;;
        esac
    done
    say "tests: $passed passed, $failed failed, $skipped skipped (no device)${unstarted:+, not started (missing libraries):$unstarted}"
    [ "$skipped" -gt 0 ] && [ "$passed" -eq 0 ] && [ "$failed" -eq 0 ] && return 2
    [ "$failed" -eq 0 ]
}

run_bench() { # run_bench BIN
    say "bench_gpu $BENCH_ARGS (timeout ${BENCH_TIMEOUT}s)"
    # shellcheck disable=SC2086
    timeout "$BENCH_TIMEOUT" "$1" $BENCH_ARGS
    local rc=$?
    [ $rc -eq 124 ] && echo "-- bench_gpu: TIMED OUT (results above are partial)"
    [ $rc -ne 0 ] && echo "-- bench_gpu: exit $rc"
    return 0
}

# loads BIN_DIR: every program starts (the dynamic loader finds all its libraries)
loads() {
    local b
    for b in "$1"/test_gpu_* "$1"/bench_gpu; do
        if ldd "$b" | grep -q 'not found' || ldd "$b" | grep -q 'version .* not found'; then
            echo "-- $(basename "$b") does not load here:"
            ldd "$b" | grep 'not found'
            return 1
        fi
    done
}

# rebuild_here DIR: the test and benchmark programs from the sources with nvcc and gcc
# only (no CMake project, no pkg-config), into DIR/bin, against DIR's OpenBLAS
rebuild_here() {
    local dir=$1 obj cudalib
    obj=$(mktemp -d)
    cudalib=$(dirname "$(find /usr/local /opt /usr/lib -name libcudart.so -o -name 'libcudart.so.13' 2>/dev/null | head -1)")
    say "rebuilding in $obj with $(command -v nvcc) (CUDA libraries in $cudalib)"
    command -v nvcc >/dev/null || { echo "no nvcc here"; return 1; }
    # at most GPU_CHECK_JOBS (default: the cores) compilers at a time
    local cu most=${GPU_CHECK_JOBS:-$(nproc)}
    throttle() { while [ "$(jobs -rp | wc -l)" -ge "$most" ]; do wait -n; done; }
    # NCCL (versions.cu: the backend's entry point gives its version) from this machine
    local nccllib
    nccllib=$(find /usr/local /opt /usr/lib -name libnccl.so.2 2>/dev/null | head -1)
    [ -n "$nccllib" ] || { echo "no libnccl.so.2 under /usr/local, /opt or /usr/lib: the rebuilt programs link it"; return 1; }
    nccllib=$(dirname "$nccllib")
    for cu in kernels/cuda/*.cu; do
        throttle
        nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80 \
            -Ikernels -Icommon -I"$dir/include" -c "$cu" -o "$obj/$(basename "$cu").o" &
    done
    local c
    for c in kernels/*.c kernels/cpu/*.c kernels/sim/*.c kernels/cuda/*.c common/ds_err.c common/ds_gpu.c common/engine_opts.c tests/gpu/gpu_harness.c; do
        throttle
        gcc -std=gnu17 -O3 -march=x86-64-v2 -fno-math-errno -fno-trapping-math -fopenmp \
            -D_GNU_SOURCE -DDS_HAVE_CUDA=1 -Ikernels -Icommon -I"$dir/include" -I"$cudalib/../include" \
            -I/usr/local/cuda/include -c "$c" -o "$obj/$(basename "$c").o" &
    done
    wait
    # shellcheck disable=SC2054 # the commas belong to -Wl
    local libs=(-L"$dir/lib" -l:libopenblas.so.0 -L"$cudalib" -l:libcudart.so.13 -l:libcublas.so.13
        -l:libcublasLt.so.13 -L"$nccllib" -l:libnccl.so.2 -fopenmp -lstdc++ -lm -ldl -Wl,-rpath,"$dir/lib")
    local t
    for t in dense attention loss optim device table write; do
        gcc -std=gnu17 -O2 -D_GNU_SOURCE -DDS_HAVE_CUDA=1 -Ikernels -Icommon -Itests/gpu -I"$cudalib/../include" -I/usr/local/cuda/include \
            "tests/gpu/test_gpu_$t.c" "$obj"/*.o \
            "${libs[@]}" -o "$dir/bin/test_gpu_$t" || return 1
    done
    gcc -std=gnu17 -O2 -D_GNU_SOURCE -DDS_HAVE_CUDA=1 -Ikernels -Icommon -I"$cudalib/../include" -I/usr/local/cuda/include bench/gpu/bench_gpu.c \
        "$obj"/*.o "${libs[@]}" -o "$dir/bin/bench_gpu" || return 1
    rm -rf "$obj"
    loads "$dir/bin"
}

show_device() {
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    else
        echo "(no nvidia-smi)"
    fi
}

# DIR.tar.xz (what `bundle` writes beside DIR, to be carried; .tar.gz as before) is
# unpacked where it lies; prints the directory to use.
unpack() {
    case $1 in
    *.tar.xz | *.tar.gz)
        [ -f "$1" ] || { echo "no bundle $1" >&2; return 1; }
        untar "$1" || return 1
        echo "${1%.tar.?z}" ;;
    *) echo "$1" ;;
    esac
}

mode=${1:-here}
case $mode in
bundle)
    dir=${2:-build-gpu-bundle}
    b=${GPU_CHECK_BUILD_DIR:-build-gpu} # an existing CUDA build may be reused
    build "$b"
    rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/lib"
    cp "$b"/tests/gpu/test_gpu_* "$b"/bench/gpu/bench_gpu "$dir/bin/"
    [ -x "$b"/tests/unit/comm/test_comm_nccl ] && cp "$b"/tests/unit/comm/test_comm_nccl "$dir/bin/"
    # for tests/gpu/run.sh; dsrun loads its CUDA backend from its own directory
    cp "$b"/runtime/dsrun "$b"/runtime/libds_cuda.so "$b"/bench/zero/zero_bench "$dir/bin/"
    # the libraries the programs load that a CUDA image may lack (OpenBLAS, libgomp, Lua,
    # Gloo, ...); the C library, the C++ runtime and the CUDA libraries (cuBLAS and NCCL
    # are hundreds of MB) are expected on the GPU machine
    for b in "$dir"/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
        grep -vE '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux-x86-64)\.so' |
        grep -vE '/cuda|/libcu|/libnccl' | while read -r lib; do
        cp -L "$lib" "$dir/lib/$(basename "$lib")"
    done
    mkdir -p "$dir/include"
    inc=$(pkg-config --cflags-only-I openblas | sed 's/^ *-I//; s/ *$//')
    cp "${inc:-/usr/include}"/{cblas.h,openblas_config.h} "$dir/include/"
    cp "$(grep -m1 '^NCCL_INCLUDE_DIR:' "$b/CMakeCache.txt" | cut -d= -f2)/nccl.h" "$dir/include/"
    du -sh "$dir"
    ls "$dir/bin" "$dir/lib" "$dir/include"
    # The device tool carries at most 64 MiB and the directory is more: each of a dozen
    # programs holds the same kernels for two GPU generations (16 MB), OpenBLAS alone is
    # 35 MB. gzip (a 32 KiB window) sees no repeat across programs: 70 MB; xz with a
    # 64 MiB dictionary (-9, one thread: threads would split it) stores them once.
    rm -f "$dir.tar.gz"
    tar -cf - "$dir" | xz -9 -T1 >"$dir.tar.xz" && du -sh "$dir.tar.xz" || exit 1
    size=$(stat -c %s "$dir.tar.xz")
    if [ "$size" -gt $((64 << 20)) ]; then
        echo "bundle: $dir.tar.xz is $size bytes, over the 64 MiB the device tool carries" >&2
        exit 1
    fi
    ;;
rebuild) # rebuild DIR: the bundle's test programs from the sources, here (tests/gpu/run.sh)
    rebuild_here "$(cd "${2:?usage: gpu-check.sh rebuild DIR}" && pwd)"
    exit $?
    ;;
run)
    dir=$(unpack "${2:?usage: gpu-check.sh run DIR}") || exit 1
    dir=$(cd "$dir" && pwd) || exit 1
    show_device
    # where the CUDA 13 runtime and cuBLAS live on this machine (toolkit or pip wheels)
    libpath="$dir/lib"
    for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
        found=$(find /usr/local /opt /usr/lib -name "$lib" 2>/dev/null | head -1)
        [ -n "$found" ] && case ":$libpath:" in
            *":$(dirname "$found"):"*) ;;
            *) libpath="$libpath:$(dirname "$found")" ;;
        esac
    done
    export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    if ! loads "$dir/bin" || [ "${GPU_CHECK_REBUILD:-0}" = 1 ]; then
        rebuild_here "$dir" || exit 1
    fi
    run_tests "$dir/bin"
    rc=$?
    [ $rc -eq 2 ] && exit 2
    run_bench "$dir/bin/bench_gpu"
    exit $rc
    ;;
*)
    dir=build-gpu
    [ "$mode" != here ] && dir=$mode
    show_device
    build "$dir"
    say "ctest -L gpu (the tests/gpu programs, and test_comm_nccl if it built)"
    excl=()
    [ -x "$dir/tests/unit/comm/test_comm_nccl" ] || excl=(-E test_comm_nccl)
    (cd "$dir" && ctest -L gpu "${excl[@]}" --output-on-failure --timeout "$TEST_TIMEOUT")
    rc=$?
    run_bench "$dir/bench/gpu/bench_gpu"
    exit $rc
    ;;
esac
