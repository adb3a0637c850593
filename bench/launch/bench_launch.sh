#!/usr/bin/env bash
# Launch benchmark: N loopback nodes x 4 slots over SSH (a private sshd, as the
# integration tests use), for N = 1, 4, 16:
#   barrier_ms    dslaunch started -> every rank past its first barrier
#   teardown_ms   one rank fails (right after the barrier) -> the last process of the
#                 job is gone (every rank stopped, every agent exited, process table clean)
# Times come from /proc/uptime (10 ms resolution), read by this script and by the ranks.
# Usage: bench/launch/bench_launch.sh [BUILD_DIR] [REPS]    (default: build, 3)
# Prints a table, then one JSON object per configuration.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
reps=${2:-3}
dslaunch=$build/launcher/dslaunch
dsrun=$build/runtime/dsrun
[[ -x $dslaunch && -x $dsrun ]] || { echo "build dslaunch and dsrun in $build first" >&2; exit 1; }

work=$(mktemp -d /tmp/ds-bench-launch.XXXXXX)
sshd_dir=$work/sshd
cleanup() {
    "$root/tests/integration/launch/sshd.sh" stop "$sshd_dir" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
"$root/tests/integration/launch/sshd.sh" start "$sshd_dir" 16 >/dev/null
. "$sshd_dir/env"
cp "$here/barrier.lua" "$work/"

uptime_now() { cut -d' ' -f1 /proc/uptime; }
job_pids() {
    { grep -lsazx -- "$1-[0-9a-f]\{8\}" /proc/[0-9]*/cmdline
      grep -lsaz -- "^DS_JOB_ID=$1-" /proc/[0-9]*/environ; } | sed -n 's#^/proc/\([0-9]*\)/.*#\1#p' | sort -u
}
max_past() { grep -h '^past ' "$1"/rank-*.out | awk '{ if ($2 > m) m = $2 } END { print m }'; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%d", (b - a) * 1000 + 0.5 }'; }
median() { tr ' ' '\n' | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# The previous run's sshd sessions may still be closing: start each run on a quiet box.
quiesce() {
    local sshd_pid end=$((SECONDS + 10))
    sshd_pid=$(cat "$sshd_dir/sshd.pid")
    while pgrep -P "$sshd_pid" > /dev/null && ((SECONDS < end)); do sleep 0.02; done
}

# run NODES NAME [FAIL_RANK]: prints "barrier_ms teardown_ms" (teardown -1 without failure)
run() {
    local nodes=$1 name=$2 fail=${3:-}
    local dir=$work/$name
    mkdir -p "$dir"
    : > "$dir/hosts"
    for i in $(seq 2 $((nodes + 1))); do echo "127.0.0.$i slots=4" >> "$dir/hosts"; done
    {
        printf '[job]\nname = %s\nscript = %s/barrier.lua\ndsrun = %s\n' "$name" "$work" "$dsrun"
        printf '[resources]\nhostfile = hosts\n[logs]\ntee = none\n'
        printf '[ssh]\nport = %s\nidentity = %s\nknown_hosts = %s\n' "$SSHD_PORT" "$SSH_IDENTITY" "$SSH_KNOWN_HOSTS"
        [[ -n $fail ]] && printf '[env]\nFAIL_RANK = %s\n' "$fail"
    } > "$dir/job.ini"
    local t0 rc=0
    quiesce
    t0=$(uptime_now)
    "$dslaunch" "$dir/job.ini" > "$dir/out" 2> "$dir/err" || rc=$?
    local t_exit
    t_exit=$(uptime_now)
    local logs=$dir/logs/$name/latest/attempt-0
    if [[ -z $fail && $rc != 0 ]]; then echo "bench: $name failed:" >&2; cat "$dir/err" >&2; exit 1; fi
    local barrier teardown=-1
    barrier=$(ms "$t0" "$(max_past "$logs")")
    if [[ -n $fail ]]; then
        local end=$((SECONDS + 10))
        while [[ -n $(job_pids "$name") ]]; do
            ((SECONDS < end)) || { echo "bench: $name left processes behind" >&2; exit 1; }
            sleep 0.01
        done
        local t_gone t_fail
        t_gone=$(uptime_now)
        t_fail=$(sed -n 's/^failing //p' "$logs/rank-$fail.out")
        # dslaunch returns only after every agent reported its node clean; the scan
        # above confirms it. The later of the two is when the last process was gone.
        teardown=$(ms "$t_fail" "$(awk -v a="$t_exit" -v b="$t_gone" 'BEGIN { print (a > b ? a : b) }')")
    fi
    echo "$barrier $teardown"
}

printf '%-6s %-6s %-6s %-22s %-22s\n' nodes slots ranks "barrier_ms (med/min)" "teardown_ms (med/min)"
json=()
for nodes in 1 4 16; do
    bs=() ts=()
    for rep in $(seq "$reps"); do
        read -r b _ < <(run "$nodes" "bench-n$nodes-r$rep")
        read -r _ t < <(run "$nodes" "bench-f$nodes-r$rep" $((nodes * 4 - 1)))
        bs+=("$b")
        ts+=("$t")
    done
    bmed=$(echo "${bs[*]}" | median); bmin=$(printf '%s\n' "${bs[@]}" | sort -n | head -1)
    tmed=$(echo "${ts[*]}" | median); tmin=$(printf '%s\n' "${ts[@]}" | sort -n | head -1)
    printf '%-6s %-6s %-6s %-22s %-22s\n' "$nodes" 4 $((nodes * 4)) "$bmed / $bmin" "$tmed / $tmin"
    json+=("{\"bench\":\"launch\",\"transport\":\"ssh-loopback\",\"nodes\":$nodes,\"slots_per_node\":4,\"ranks\":$((nodes * 4)),\"reps\":$reps,\"barrier_ms_median\":$bmed,\"barrier_ms_min\":$bmin,\"teardown_ms_median\":$tmed,\"teardown_ms_min\":$tmin,\"clock_resolution_ms\":10}")
done
printf '%s\n' "${json[@]}"
