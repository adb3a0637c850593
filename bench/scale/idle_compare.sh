#!/usr/bin/env bash
# The controller's cost in a steady state, two builds side by side (docs/scale.md): for
# each node count, run.sh with IDLE_S on the BEFORE and the AFTER build, alternating,
# REPS times, every rank idle past its first barrier but rank 0, which prints a line
# every CHATTER_MS (default 1). Both builds run AFTER's light ranks. Prints run.sh's JSON
# line per run (with "build"), then one line per node count: the medians of the main
# thread's CPU time over the window and their ratio (before / after).
# Usage: bench/scale/idle_compare.sh BEFORE_BUILD AFTER_BUILD [REPS [IDLE_S [NODES...]]]
#   (ranks per node: RANKS, default 8)
set -euo pipefail
before=$(cd "${1:?usage: idle_compare.sh BEFORE_BUILD AFTER_BUILD [REPS [IDLE_S [NODES...]]]}" && pwd)
after=$(cd "${2:?usage: idle_compare.sh BEFORE_BUILD AFTER_BUILD [REPS [IDLE_S [NODES...]]]}" && pwd)
reps=${3:-3}
idle=${4:-8}
shift $(($# < 4 ? $# : 4))
counts=(32 128)
[[ $# -eq 0 ]] || counts=("$@")
here=$(cd "$(dirname "$0")" && pwd)
export SIM_RANK=$after/tests/integration/scale/sim_rank IDLE_S=$idle
out=$(mktemp /tmp/ds-idle-compare.XXXXXX)
trap 'rm -f "$out"' EXIT
for nodes in "${counts[@]}"; do
    for ((r = 0; r < reps; r++)); do
        for b in before after; do
            dir=$before
            [[ $b == after ]] && dir=$after
            line=$("$here/run.sh" "$nodes" "${RANKS:-8}" "$dir")
            echo "{\"build\": \"$b\", ${line#\{}" | tee -a "$out"
        done
    done
done
python3 - "$out" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
for nodes in sorted({r["nodes"] for r in runs}):
    cpu = {b: [r["idle_main_cpu_s"] / r["idle_s"] for r in runs if r["nodes"] == nodes and r["build"] == b]
           for b in ("before", "after")}
    med = {b: statistics.median(v) for b, v in cpu.items()}
    print(json.dumps({"nodes": nodes, "main_cpu_ms_per_s_before": [round(1000 * x, 2) for x in cpu["before"]],
                      "main_cpu_ms_per_s_after": [round(1000 * x, 2) for x in cpu["after"]],
                      "ratio_of_medians": round(med["before"] / med["after"], 2) if med["after"] else None,
                      "lines_per_s": [r.get("chatter_lines_per_s") for r in runs if r["nodes"] == nodes]}))
PY
