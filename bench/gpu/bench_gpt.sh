#!/usr/bin/env bash
# bench/gpu/bench_gpt.sh: GPT-2 124M and 350M, bf16, T = 1024, on one GPU through the
# engine (dsrun run bench/gpu/bench_gpt.lua on device = cuda): tokens/s, MFU, peak
# memory per category, with and without full activation checkpointing, ZeRO 0-3 at
# world 1. One JSON line per configuration; configurations are run most telling first
# and those past the time budget are listed as skipped.
# Environment: DSRUN (default build/runtime/dsrun), BENCH_BUDGET_S (default 300),
# GPU_PEAK_TFLOPS (default: looked up from nvidia-smi's name; H100/H200: 989),
# BENCH_B (micro-batch, default 8 for 124M and 4 for 350M), BENCH_STEPS (default 5).
# A check of the script itself on any machine: BENCH_DEVICE=sim BENCH_MODEL=tiny BENCH_T=32
# GPU_PEAK_TFLOPS=1 (every configuration on bench_gpt.lua's tiny model, on sim).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
DSRUN=${DSRUN:-build/runtime/dsrun}
BUDGET=${BENCH_BUDGET_S:-300}
START=$(date +%s)
export DS_LUA_DIR=${DS_LUA_DIR:-$PWD/lua}

peak=${GPU_PEAK_TFLOPS:-}
if [ -z "$peak" ]; then # dense bf16 tensor-core peaks (no sparsity)
    name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
    case $name in
    *H100*PCIe*) peak=756 ;;
    *H100* | *H200*) peak=989 ;; # GH200 too
    *A100*) peak=312 ;;
    *L40S*) peak=362 ;;
    *) peak=989; echo "{\"bench\":\"gpt_gpu\",\"note\":\"unknown GPU '$name': MFU against 989 TFLOP/s; set GPU_PEAK_TFLOPS\"}" ;;
    esac
fi

# model zero checkpoint, most telling first
configs=(
    "124M 0 none" "124M 0 full" "350M 0 none" "350M 0 full"
    "124M 3 none" "124M 1 none" "124M 2 none" "124M 3 full"
    "350M 3 none" "350M 1 none" "350M 2 none" "350M 3 full"
    "124M 1 full" "124M 2 full" "350M 1 full" "350M 2 full"
)
for c in "${configs[@]}"; do
    read -r model zero ckpt <<<"$c"
    left=$((BUDGET - ($(date +%s) - START)))
    if [ "$left" -lt 25 ]; then
        echo "{\"bench\":\"gpt_gpu\",\"model\":\"gpt2-$model\",\"zero\":$zero,\"checkpoint\":\"$ckpt\",\"skipped\":\"time budget\"}"
        continue
    fi
    B=${BENCH_B:-$([ "$model" = 124M ] && echo 8 || echo 4)}
    [ -n "${BENCH_MODEL:-}" ] && model=$BENCH_MODEL
    out=$(DS_ENGINE_DEVICE=${BENCH_DEVICE:-cuda} timeout "$left" "$DSRUN" run bench/gpu/bench_gpt.lua model="$model" \
        B="$B" T="${BENCH_T:-1024}" steps="${BENCH_STEPS:-5}" zero="$zero" checkpoint="$ckpt" precision=bf16 \
        peak_tflops="$peak" 2>&1)
    rc=$?
    line=$(grep '^{"bench":"gpt_gpu"' <<<"$out" | tail -1)
    if [ $rc -eq 0 ] && [ -n "$line" ]; then
        echo "$line"
    else
        why=$(tail -1 <<<"$out" | tr -d "\"\\\\")
        echo "{\"bench\":\"gpt_gpu\",\"model\":\"gpt2-$model\",\"zero\":$zero,\"checkpoint\":\"$ckpt\",\"failed\":\"exit $rc: $why\"}"
    fi
done
