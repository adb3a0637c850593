#!/bin/sh
# synth_ranks.sh DSRUN SCRIPT: runs SCRIPT as every rank of worlds of 1, 2 and 3 ranks,
# each a `dsrun worker` that reads its rank from the environment as under dslaunch (no
# store and no agent: the script needs no collective).
set -eu
dsrun=$1 script=$2
for world in 1 2 3; do
    rank=0
    while [ "$rank" -lt "$world" ]; do
        env -u DS_RDZV -u DS_AGENT_FD RANK="$rank" WORLD_SIZE="$world" LOCAL_RANK="$rank" \
            LOCAL_WORLD_SIZE="$world" NODE_RANK=0 "$dsrun" worker "$script"
        rank=$((rank + 1))
    done
done
echo "synth ranks: ok"
