#!/usr/bin/env bash
# What relays take off the controller over SSH (docs/scale.md#relays): NODES loopback
# nodes x 1 rank (barrier.lua) through a private sshd (the integration tests' sshd.sh),
# started directly (the controller opens NODES sessions) and through relays
# ([launch] relay_threshold = 1, relay_fanout = FANOUT: the controller opens
# ⌈NODES/FANOUT⌉ sessions, the relays the rest). Prints one JSON line per run:
# controller_ssh_sessions, controller_cpu_s (all threads; main / store / relay thread
# apart) and relays_cpu_s (every relay's CPU time, sampled every 50 ms).
# Usage: bench/scale/ssh_relays.sh [BUILD_DIR] [REPS] [NODES] [FANOUT]   (default: build, 3, 16, 4)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
reps=${2:-3}
nodes=${3:-16}
fanout=${4:-4}
dslaunch=$build/launcher/dslaunch
dsrun=$build/runtime/dsrun
[[ -x $dslaunch && -x $dsrun ]] || { echo "build dslaunch and dsrun in $build first" >&2; exit 1; }
((nodes <= 16)) || { echo "ssh_relays.sh: at most 16 nodes (sshd listens on 16 addresses)" >&2; exit 1; }

work=$(mktemp -d /tmp/ds-bench-ssh-relays.XXXXXX)
cleanup() {
    "$root/tests/integration/launch/sshd.sh" stop "$work/sshd" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
"$root/tests/integration/launch/sshd.sh" start "$work/sshd" 16 >/dev/null
. "$work/sshd/env"

# run MODE REP: MODE direct or relays
run() {
    local name=sshrel-$1-$2-$$ dir=$work/$1-$2
    mkdir -p "$dir"
    for i in $(seq 2 $((nodes + 1))); do echo "127.0.0.$i slots=1"; done > "$dir/hosts"
    {
        printf '[job]\nname = %s\nscript = %s/../launch/barrier.lua\ndsrun = %s\n' "$name" "$here" "$dsrun"
        printf '[resources]\nhostfile = hosts\ndevice = cpu\n[logs]\ntee = none\n'
        printf '[ssh]\nport = %s\nidentity = %s\nknown_hosts = %s\n' "$SSHD_PORT" "$SSH_IDENTITY" "$SSH_KNOWN_HOSTS"
        if [[ $1 == relays ]]; then printf '[launch]\nrelay_threshold = 1\nrelay_fanout = %s\n' "$fanout"
        else printf '[launch]\nrelay_threshold = 0\n'; fi
    } > "$dir/job.ini"
    SAMPLE_JOB=$name python3 "$here/sample.py" "$dir/sample.json" "$dir/out" "$dir/err" "$dir/none" "$dslaunch" "$dir/job.ini"
    local sessions=$nodes
    [[ $1 == relays ]] && sessions=$(((nodes + fanout - 1) / fanout))
    python3 - "$dir/sample.json" "$1" "$nodes" "$sessions" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
if s["exit"] != 0:
    sys.exit(f"ssh_relays.sh: the {sys.argv[2]} job failed (exit {s['exit']})")
print(json.dumps({"bench": "ssh_relays", "mode": sys.argv[2], "nodes": int(sys.argv[3]),
                  "controller_ssh_sessions": int(sys.argv[4]), "controller_cpu_s": s["cpu_total_s"],
                  "controller_cpu_main_s": s["cpu_main_s"], "controller_cpu_relay_s": s["cpu_relay_thread_s"],
                  "relays_cpu_s": s["relays_cpu_s"]}))
PY
}

for rep in $(seq "$reps"); do
    run direct "$rep"
    run relays "$rep"
done
