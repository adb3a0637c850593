#!/usr/bin/env bash
# tests/gpu/run.sh [DIR]: everything the GPU path has to prove, on one lent GPU, in under
# 8 minutes, one line per check and a results file:
#   1. every GPU test program (tests/gpu: the kernels against the CPU kernels, the
#      device's contract, the kernel table entry by entry; each prints one line per
#      check), and test_comm_nccl (a world-of-one NCCL communicator on the device);
#   2. bad input (test_gpu_bad_input.sh: out of GPU memory, two ranks on one GPU, a GPU
#      the node does not have) and the ZeRO memory test on the device (zero_bench,
#      world 1: every byte as the formulas say);
#   3. a tiny GPT trained 50 steps with `dsrun run` on device = cuda, following the same
#      run on device = cpu within tolerance, in fp32 and bf16 ("engine path not
#      available" when dsrun cannot train on cuda);
#   4. the benchmark (bench/gpu/bench_gpt.sh) in the time left.
# DIR: a bundle made here by `scripts/gpu-check.sh bundle` (DIR/bin, DIR/lib, or the
# DIR.tar.xz it writes beside, unpacked first), or a build tree; default: build-gpu-bundle if it exists, else build-gpu (built now with
# CMake when missing). With OUT set (the device tool's result folder) the log and the
# results go there; else to DIR. Exit: 0 all passed, 1 something failed, 2 no GPU.
set -uo pipefail
DIR=${1:-}
# a bundle given from another directory is found after the cd below
[ -n "$DIR" ] && [ -e "$DIR" ] && DIR=$(realpath "$DIR")
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
START=$(date +%s)
BUDGET=${GPU_RUN_BUDGET_S:-460} # seconds for everything; the benchmark gets what is left
. scripts/untar.sh
case $DIR in # the bundle as carried (scripts/gpu-check.sh bundle writes it beside DIR)
*.tar.xz | *.tar.gz) untar "$DIR" || exit 1; DIR=${DIR%.tar.?z} ;;
esac
[ -z "$DIR" ] && { [ -d build-gpu-bundle/bin ] && DIR=build-gpu-bundle || DIR=build-gpu; }
RES_DIR=${OUT:-$DIR}
mkdir -p "$RES_DIR"
RESULTS=$RES_DIR/gpu-results.txt
: >"$RESULTS"
exec > >(tee "$RES_DIR/gpu-run.log") 2>&1

elapsed() { echo $(($(date +%s) - START)); }
left() { echo $((BUDGET - $(elapsed))); }
result() { echo "$*" | tee -a "$RESULTS"; } # one line per check: PASS|FAIL|SKIP name detail

if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$RESULTS"
else
    echo "no nvidia-smi" | tee -a "$RESULTS"
fi

# ---- the programs --------------------------------------------------------------------
if [ -d "$DIR/bin" ]; then # a bundle: find this machine's CUDA libraries
    BIN=$DIR/bin
    libpath=$(cd "$DIR/lib" && pwd) # DIR may be relative to ROOT or absolute
    for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
        found=$(find /usr/local /opt /usr/lib -name "$lib" 2>/dev/null | head -1)
        [ -n "$found" ] && libpath="$libpath:$(dirname "$found")"
    done
    export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if ldd "$BIN"/test_gpu_dense 2>/dev/null | grep -q 'not found'; then
        echo "the bundle does not load here: rebuilding its test programs (scripts/gpu-check.sh)"
        GPU_CHECK_REBUILD=1 timeout 300 scripts/gpu-check.sh rebuild "$DIR" || result "FAIL rebuild"
    fi
    DSRUN=$BIN/dsrun
    NCCL_TEST=$BIN/test_comm_nccl
    ZERO_BENCH=$BIN/zero_bench
else
    if [ ! -x "$DIR/tests/gpu/test_gpu_dense" ]; then
        echo "building $DIR"
        if ! { cmake -S . -B "$DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null &&
            cmake --build "$DIR" -j "$(nproc)" >"$RES_DIR/gpu-build.log" 2>&1; }; then
            result "FAIL build (see gpu-build.log)"
            exit 1
        fi
    fi
    BIN=$DIR/tests/gpu
    DSRUN=$DIR/runtime/dsrun
    NCCL_TEST=$DIR/tests/unit/comm/test_comm_nccl
    ZERO_BENCH=$DIR/bench/zero/zero_bench
fi
export DS_LUA_DIR=$ROOT/lua

failed=0
run_program() { # run_program NAME PATH TIMEOUT
    local name=$1 prog=$2 t=$3 rc s
    if [ ! -x "$prog" ]; then result "SKIP $name (not built)"; return; fi
    if [ "$(left)" -lt 30 ]; then result "SKIP $name (time budget spent)"; return; fi
    s=$(date +%s)
    timeout "$t" "$prog" >"$RES_DIR/$name.out" 2>&1
    rc=$?
    # every check line of the program, as it printed it
    grep -E '^(ok  |FAIL)' "$RES_DIR/$name.out" | sed "s/^/  $name: /" | tee -a "$RESULTS"
    case $rc in
    0) result "PASS $name ($(($(date +%s) - s)) s)" ;;
    77)
        result "SKIP $name: $(tail -1 "$RES_DIR/$name.out")"
        if [ "$name" = test_gpu_device ]; then
            result "NO GPU: no usable GPU on this machine, nothing else was checked (exit 2)"
            exit 2
        fi
        ;;
    124) result "FAIL $name: timed out after $t s"; failed=1 ;;
    *) result "FAIL $name: exit $rc: $(grep -v '^ok' "$RES_DIR/$name.out" | tail -2 | tr '\n' ' ')"; failed=1 ;;
    esac
}

run_program test_gpu_device "$BIN/test_gpu_device" 60
for t in table write dense attention loss optim; do run_program "test_gpu_$t" "$BIN/test_gpu_$t" 75; done
run_program test_comm_nccl "$NCCL_TEST" 90

# ---- bad input: clear errors, never a crash --------------------------------------------
if [ -x "$DSRUN" ]; then
    timeout 300 tests/gpu/test_gpu_bad_input.sh "$DSRUN" >"$RES_DIR/bad-input.out" 2>&1
    rc=$?
    sed 's/^/  test_gpu_bad_input: /' "$RES_DIR/bad-input.out" | tee -a "$RESULTS"
    if [ $rc -eq 0 ]; then result "PASS test_gpu_bad_input"; else result "FAIL test_gpu_bad_input: exit $rc"; failed=1; fi
else
    result "SKIP test_gpu_bad_input (no dsrun in $DIR)"
fi

# ---- the ZeRO memory test on the device: the counters against the formulas, to the byte --
if [ ! -x "$ZERO_BENCH" ]; then
    result "SKIP zero memory on cuda (no zero_bench in $DIR)"
elif [ "$(left)" -lt 60 ]; then
    result "SKIP zero memory on cuda (time budget spent)"
else
    DS_ENGINE_DEVICE=cuda timeout 120 "$ZERO_BENCH" bench/zero/zero_bench.lua 1 precision=fp32,bf16 \
        vocab=500 d=120 layers=3 steps=1 warmup=1 repeat=1 >"$RES_DIR/zero-memory.out" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
        result "PASS zero memory on cuda: ZeRO 0-3, fp32 and bf16, world 1, every byte as the formulas say"
    else
        result "FAIL zero memory on cuda: exit $rc: $(tail -2 "$RES_DIR/zero-memory.out" | tr '\n' ' ')"
        failed=1
    fi
fi

# ---- a tiny GPT on cuda against cpu ---------------------------------------------------
# losses per step from train.lua's metrics file
losses() { sed -E 's/.*"loss":([^,]*).*/\1/' "$1"; }
gpt_run() { # gpt_run DEVICE PRECISION FILE
    DS_ENGINE_DEVICE=$1 DS_ENGINE_PRECISION=$2 timeout 120 "$DSRUN" run examples/gpt/train.lua \
        examples/gpt/tiny.lua steps=50 log_every=1 "metrics=$3" >"$3.log" 2>&1
}
gpt_compare() { # gpt_compare PRECISION RTOL
    local p=$1 tol=$2 cpu=$RES_DIR/gpt-cpu-$1.jsonl gpu=$RES_DIR/gpt-cuda-$1.jsonl
    if [ "$(left)" -lt 60 ]; then result "SKIP gpt 50 steps $p (time budget spent)"; return; fi
    gpt_run cpu "$p" "$cpu" || { result "FAIL gpt 50 steps $p: the cpu run: $(tail -1 "$cpu.log")"; failed=1; return; }
    gpt_run cuda "$p" "$gpu" || { result "FAIL gpt 50 steps $p: the cuda run: $(tail -1 "$gpu.log")"; failed=1; return; }
    local verdict
    verdict=$(paste <(losses "$cpu") <(losses "$gpu") | awk -v tol="$tol" '
        { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($1 > 1 ? $1 : 1); if (r > worst) { worst = r; at = n }
          last_cpu = $1; last_gpu = $2 }
        END { printf "%s %d steps, worst relative difference %.3g at step %d, last loss cpu %.4f cuda %.4f (tolerance %g)",
              (n == 50 && worst <= tol) ? "PASS" : "FAIL", n, worst, at, last_cpu, last_gpu, tol }')
    result "${verdict%% *} gpt 50 steps $p: ${verdict#* }"
    [ "${verdict%% *}" = PASS ] || failed=1
}
probe=$(mktemp --suffix=.lua)
cat >"$probe" <<'EOF'
local ds = require 'ds'
local dev = ds.memory().device
print('the engine runs on ' .. dev)
assert(dev:match('^cuda:'), 'not on a GPU: ' .. dev)
EOF
if [ ! -x "$DSRUN" ]; then
    result "SKIP gpt 50 steps: engine path not available (no dsrun in $DIR)"
elif ! DS_ENGINE_DEVICE=cuda timeout 60 "$DSRUN" run "$probe" >"$RES_DIR/engine-probe.log" 2>&1; then
    result "SKIP gpt 50 steps: engine path not available: $(tail -1 "$RES_DIR/engine-probe.log")"
else
    gpt_compare fp32 0.01 # fp32: cuBLAS and OpenBLAS sum in other orders
    gpt_compare bf16 0.05 # bf16 working copies: rounding to 8 bits moves the losses more
fi
rm -f "$probe"

# ---- the benchmark ---------------------------------------------------------------------
if [ "$(left)" -gt 60 ] && [ -x "$DSRUN" ]; then
    DSRUN=$DSRUN BENCH_BUDGET_S=$(($(left) - 10)) bench/gpu/bench_gpt.sh | tee "$RES_DIR/bench-gpt.jsonl"
    grep -c '"tokens_per_s"' "$RES_DIR/bench-gpt.jsonl" | sed 's/^/bench configurations measured: /' | tee -a "$RESULTS"
else
    result "SKIP bench/gpu/bench_gpt.sh ($( [ -x "$DSRUN" ] && echo 'time budget spent' || echo 'no dsrun'))"
fi
echo "total $(elapsed) s; results in $RESULTS" | tee -a "$RESULTS"
exit $failed
