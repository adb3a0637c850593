#!/usr/bin/env bash
# Scale benchmark on a simulated cluster (docs/scale.md): NODES agents on this machine,
# each a node of its own (loopback addresses 127.0.x.y, [launch] method = local), each
# with RANKS light ranks (sim_rank: they join the store and pass barriers, no training).
# Prints one JSON line:
#   wall_s                 dslaunch started -> exited (the ranks end after their barriers)
#   first_barrier_s        dslaunch started -> rank 0 past the first barrier of the world
#   controller_cpu_s       the controller's CPU time, all threads; _main_s / _store_s apart
#   controller_cpu_to_barrier_s  the same when rank 0's log appeared (its first output,
#                          past the first barrier), sampled every 50 ms
#   store_connections_peak TCP connections to the store at once, at most
#   fds_peak               the controller's open descriptors, at most
#   controller_rss_mb      the controller's peak resident memory
#   store_requests         requests the store served, heartbeats left out (launcher.log's
#                          "store served" line); store_barrier_requests: BARRIER ones
#   controller_children_peak  the controller's child processes at once: its local agents, or
#                          its relays (docs/scale.md#relays)
#   load                   the 1-minute load average before the run (2-core machines are shared)
# With RELAY_THRESHOLD set (its [launch] relay_threshold; RELAY_FANOUT: relay_fanout) the
# nodes start through relays, and it adds relays (how many), controller_cpu_relay_s (the
# controller's thread that serves them), relays_cpu_s (the relays' own CPU time, all of
# them) and relay_cpu_max_s (the busiest one's), sampled every 50 ms. Without it the
# nodes start directly (relay_threshold = 0).
# With IDLE_S set, the ranks stay IDLE_S + 4 seconds past their barriers, rank 0 printing
# a line every CHATTER_MS (default 1; 0: silent), and it adds idle_s and
# idle_main_cpu_s: the controller's main thread's CPU time over IDLE_S seconds of that
# steady state (from 2 s after rank 0's first output), chatter_ms, and chatter_lines_per_s
# (the lines rank 0 printed per second: about the loop's passes). SIM_RANK names
# the light rank to run (default: the build's), so two builds run the same ranks.
# Usage: bench/scale/run.sh NODES RANKS [BUILD_DIR]   (env SIM_BARRIERS: barriers per rank)
set -euo pipefail
nodes=${1:?usage: run.sh NODES RANKS [BUILD_DIR]}
ranks=${2:?usage: run.sh NODES RANKS [BUILD_DIR]}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${3:-$root/build}" && pwd)
dslaunch=$build/launcher/dslaunch
dsrun=$build/runtime/dsrun
sim=${SIM_RANK:-$build/tests/integration/scale/sim_rank}
for f in "$dslaunch" "$dsrun" "$sim"; do [[ -x $f ]] || { echo "run.sh: build $f first" >&2; exit 1; }; done

work=$(mktemp -d /tmp/ds-bench-scale.XXXXXX)
trap 'rm -rf "$work"' EXIT
name=scale-$nodes-$ranks-$$
for ((i = 0; i < nodes; i++)); do echo "127.0.$((i / 250)).$((i % 250 + 2)) slots=$ranks"; done > "$work/hosts"
cat > "$work/job.ini" <<INI
[job]
name = $name
script = $sim
dsrun = $dsrun
[resources]
hostfile = hosts
[launch]
method = local
relay_threshold = ${RELAY_THRESHOLD:-0}
relay_fanout = ${RELAY_FANOUT:-0}
[logs]
tee = none
INI

if [[ -n ${IDLE_S:-} ]]; then
    export SIM_IDLE_S=$((IDLE_S + 4)) SIM_CHATTER_MS=${CHATTER_MS:-1} SAMPLE_IDLE_FROM=2 SAMPLE_IDLE_FOR=$IDLE_S
fi
load=$(cut -d' ' -f1 /proc/loadavg)
t0=$(cut -d' ' -f1 /proc/uptime)
DS_TEST_WORKER_EXE=$sim SAMPLE_JOB=$name python3 "$here/sample.py" "$work/sample.json" "$work/out" "$work/err" \
    "$work/logs/$name/latest/attempt-0/rank-0.out" "$dslaunch" "$work/job.ini"
t1=$(cut -d' ' -f1 /proc/uptime)
rc=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["exit"])' "$work/sample.json")
if [[ $rc != 0 ]]; then
    echo "run.sh: the job failed (exit $rc):" >&2
    tail -n 20 "$work/err" >&2
    exit 1
fi
past=$(sed -n 's/^past //p' "$work/logs/$name/latest/attempt-0/rank-0.out")
lines=$(grep -c '^line ' "$work/logs/$name/latest/attempt-0/rank-0.out" || true)
served=$(grep -o 'store served [^"]*' "$work/logs/$name/latest/launcher.log")
relays=$(sed -n 's/.*relays: [0-9]* nodes through \([0-9]*\) relays.*/\1/p' "$work/logs/$name/latest/launcher.log")
python3 - "$work/sample.json" "$nodes" "$ranks" "$t0" "$t1" "$past" "$load" "$served" "${relays:-0}" "$lines" <<'PY'
import json, os, re, sys
s = json.load(open(sys.argv[1]))
nodes, ranks, t0, t1, past, load = int(sys.argv[2]), int(sys.argv[3]), *map(float, sys.argv[4:8])
served = {k: int(v) for k, v in re.findall(r"(\w+) (\d+)", sys.argv[8].split(":", 1)[1])}
served["total"] = int(re.search(r"served (\d+) requests", sys.argv[8]).group(1))
relays = int(sys.argv[9])
idle = {"idle_s": s["idle_window_s"], "idle_main_cpu_s": s["idle_main_cpu_s"],
        "chatter_ms": int(os.environ.get("SIM_CHATTER_MS", "0")),
        "chatter_lines_per_s": round(int(sys.argv[10]) / int(os.environ["SIM_IDLE_S"]))} if "idle_window_s" in s else {}
extra = {"relays": relays, "controller_cpu_relay_s": s["cpu_relay_thread_s"], "relays_cpu_s": s["relays_cpu_s"],
         "relay_cpu_max_s": s["relay_cpu_max_s"]} if relays else {}
print(json.dumps({"bench": "scale", "nodes": nodes, "ranks_per_node": ranks, **extra,
                  "wall_s": round(t1 - t0, 2), "first_barrier_s": round(past - t0, 2),
                  "controller_cpu_s": s["cpu_total_s"], "controller_cpu_to_barrier_s": s["cpu_to_watch_s"],
                  "controller_cpu_main_s": s["cpu_main_s"], "controller_cpu_store_s": s["cpu_store_s"],
                  "store_connections_peak": s["store_connections_peak"], "fds_peak": s["fds_peak"],
                  "controller_children_peak": s["children_peak"], "controller_rss_mb": s["rss_mb"],
                  "store_requests": served["total"] - served["heartbeat"],
                  "store_barrier_requests": served.get("barrier", 0), **idle, "load": load}))
PY
