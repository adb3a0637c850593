#!/usr/bin/env bash
# test_gpu_bad_input.sh DSRUN: bad GPU input ends a rank with a clear error (exit 1, the
# device, the reason, the bytes), never a crash or a hang. Runs everywhere: without a GPU
# it checks what can be checked there, with one it checks the GPU's cases too.
#   always:   device = cuda without a usable GPU (or, with one, that it opens);
#             out of device memory on sim (the same allocator path a GPU takes)
#   with GPU: out of GPU memory; two ranks of one job on one GPU; a GPU index the node
#             does not have (CUDA_VISIBLE_DEVICES beyond the count)
set -uo pipefail
DSRUN=$(realpath "${1:?usage: test_gpu_bad_input.sh DSRUN}")
cd "$(dirname "$0")" || exit 1
export DS_LUA_DIR=${DS_LUA_DIR:-$(realpath ../../lua)}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"; [ -n "${holder:-}" ] && kill "$holder" 2>/dev/null' EXIT
failed=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; failed=1; }
# expect NAME RC PATTERN FILE: exit status RC (1: an error, not a signal) and PATTERN in FILE
expect() {
    if [ "$2" -ne 1 ]; then bad "$1: exit $2, expected 1: $(tail -2 "$4")"
    elif ! grep -qE -- "$3" "$4"; then bad "$1: no '$3' in: $(tail -2 "$4")"
    else ok "$1: $(grep -E -- "$3" "$4" | head -1 | cut -c1-200)"; fi
}
echo 'print("device opened")' >"$TMP/ok.lua"

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
DS_ENGINE_DEVICE=cuda timeout 60 "$DSRUN" run "$TMP/ok.lua" >"$TMP/cuda.out" 2>&1
rc=$?
if [ "$ngpu" -eq 0 ]; then
    expect "device = cuda without a GPU" $rc \
        '\[engine\] device = cuda: device cuda:0: (no usable GPU on this node|this build has no CUDA)' "$TMP/cuda.out"
elif [ $rc -eq 0 ]; then
    ok "device = cuda opens on a node with $ngpu GPU(s)"
else
    bad "device = cuda on a node with $ngpu GPU(s): exit $rc: $(tail -2 "$TMP/cuda.out")"
fi

DS_ENGINE_DEVICE=sim DS_SIM_MEMORY=32MiB timeout 120 "$DSRUN" run lua/gpt_too_big.lua >"$TMP/sim-oom.out" 2>&1
expect "out of memory on sim" $? \
    'out of sim memory: [0-9]+ bytes of params asked, [0-9.]+ MiB free .*this rank holds params' "$TMP/sim-oom.out"

if [ "$ngpu" -gt 0 ]; then
    DS_ENGINE_DEVICE=cuda timeout 120 "$DSRUN" run lua/gpt_too_big.lua big >"$TMP/cuda-oom.out" 2>&1
    expect "out of GPU memory" $? \
        'out of cuda:0 memory: [0-9]+ bytes of params asked, [0-9.]+ MiB free .*this rank holds params' "$TMP/cuda-oom.out"

    job=badinput$$
    DS_JOB_ID=$job RANK=0 CUDA_VISIBLE_DEVICES=0 DS_ENGINE_DEVICE=cuda \
        timeout 90 "$DSRUN" run lua/hold_device.lua "$TMP/release" >"$TMP/hold.out" 2>&1 &
    holder=$!
    for _ in $(seq 600); do grep -q 'holding the device' "$TMP/hold.out" && break; sleep 0.1; done
    DS_JOB_ID=$job RANK=1 CUDA_VISIBLE_DEVICES=0 DS_ENGINE_DEVICE=cuda \
        timeout 60 "$DSRUN" run "$TMP/ok.lua" >"$TMP/second.out" 2>&1
    expect "two ranks on one GPU" $? 'two ranks on one GPU: .*already used by this job.s rank 0' "$TMP/second.out"
    touch "$TMP/release"
    wait "$holder" || bad "the rank holding the GPU: $(tail -2 "$TMP/hold.out")"
    holder=

    CUDA_VISIBLE_DEVICES=$ngpu DS_ENGINE_DEVICE=cuda timeout 60 "$DSRUN" run "$TMP/ok.lua" >"$TMP/beyond.out" 2>&1
    expect "a GPU the node does not have" $? "no usable GPU on this node: .*CUDA_VISIBLE_DEVICES=$ngpu" "$TMP/beyond.out"
fi
exit $failed
