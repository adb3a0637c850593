#!/usr/bin/env bash
# bench/gpu/step_traffic.sh: what a GPT-2 124M and 350M training step (bf16, T = 1024,
# ZeRO 0, world 1) asks of a GPU, with and without full activation checkpointing, counted
# on the simulated GPU (no GPU needed) and extrapolated to B = 8: bench/gpu/step_traffic.lua
# once per configuration, its JSON lines and tables in turn. The first configuration runs
# a third micro-batch that must lie on the line the first two give (every count a + b*B).
# About 15 minutes on 2 cores. Environment: DSRUN (default build/runtime/dsrun),
# TRAFFIC_DEVICE (default sim), TRAFFIC_MODELS (default "124M 350M").
set -euo pipefail
cd "$(dirname "$0")/../.." || exit 1
DSRUN=${DSRUN:-build/runtime/dsrun}
export DS_LUA_DIR=${DS_LUA_DIR:-$PWD/lua}
first=1
for model in ${TRAFFIC_MODELS:-124M 350M}; do
    for ckpt in none full; do
        bs=1,2
        [ $first = 1 ] && bs=1,2,3 && first=0
        DS_ENGINE_DEVICE=${TRAFFIC_DEVICE:-sim} "$DSRUN" run bench/gpu/step_traffic.lua \
            model="$model" checkpoint="$ckpt" Bs="$bs" target_B=8 T=1024 precision=bf16
    done
done
