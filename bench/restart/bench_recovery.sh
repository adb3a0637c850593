#!/usr/bin/env bash
# Failure recovery benchmark: a 2-node x 2-rank job (each node in a network namespace of
# its own with its own sshd, plus a spare node), the tiny GPT of the restart tests with
# ZeRO-2 saving every 5 steps, broken in one of four ways once it trains steadily:
#   worker   SIGKILL to rank 1's worker
#   agent    SIGKILL to node 1's agent
#   node     SIGKILL to every process of node 1 (its sshd too): excluded, the spare takes over
#   hang     SIGSTOP to rank 1's worker, [restart] hang_timeout = 2 s
# and measures, from the moment of the kill (bash's EPOCHREALTIME, microseconds):
#   kill_to_stopped_s   every rank process of the first attempt is gone
#   kill_to_resumed_s   the restarted attempt has logged its first training step
# Needs root (network namespaces). Usage: bench/restart/bench_recovery.sh [BUILD_DIR] [REPS]
# (default: build, 3); KINDS="worker hang" runs only those. Prints one JSON object per kind
# (medians and minima over REPS).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
reps=${2:-3}
dslaunch=$build/launcher/dslaunch
dsrun=$build/runtime/dsrun
[[ -x $dslaunch && -x $dsrun ]] || { echo "build dslaunch and dsrun in $build first" >&2; exit 1; }
[[ $(id -u) == 0 ]] || { echo "bench_recovery: needs root (network namespaces)" >&2; exit 1; }

work=$(mktemp -d /tmp/ds-bench-recovery.XXXXXX)
tag="dsb$$"
cleanup() {
    [[ -n ${dl:-} ]] && kill -KILL "$dl" 2>/dev/null
    "$root/tests/integration/restart/netns.sh" down "$tag" "$work/netns" >/dev/null 2>&1 || true
    "$root/tests/integration/launch/sshd.sh" stop "$work/sshd" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
"$root/tests/integration/launch/sshd.sh" start "$work/sshd" 1 >/dev/null
"$root/tests/integration/restart/netns.sh" up "$tag" 3 "$work/sshd" "$work/netns"
. "$work/sshd/env"
. "$work/netns/net"
mapfile -t ip < "$work/netns/hosts"

now() { echo "${EPOCHREALTIME/./}"; } # microseconds
# 1 while any of the pids is a live process (a zombie waiting for its reaper is gone).
any_alive() {
    local p state
    for p in "$@"; do
        state=$(sed -n 's/^[0-9]* (.*) \(.\).*/\1/p' "/proc/$p/stat" 2>/dev/null)
        [[ -n $state && $state != Z ]] && return 0
    done
    return 1
}
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b - a) / 1e6 }'; }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# run KIND NAME: sets stopped_s and resumed_s
run() {
    local kind=$1 name=$2 dir=$work/$2
    mkdir -p "$dir"
    printf '%s slots=2\n%s slots=2\n%s slots=2 spare\n' "${ip[0]}" "${ip[1]}" "${ip[2]}" > "$dir/hosts"
    cat > "$dir/tiny.lua" <<CFG
return {model = {vocab = 32, context = 16, d = 32, layers = 2, heads = 2, dropout = 0.1},
        batch = 4, steps = 100000, warmup = 2, log_every = 1, save_every = 5, ckpt = 'ck'}
CFG
    {
        printf '[job]\nname = %s\nscript = %s\nargs = tiny.lua\ndsrun = %s\nworkdir = %s\n' "$name" \
            "$root/examples/gpt/train.lua" "$dsrun" "$dir"
        printf '[resources]\nhostfile = hosts\n[rendezvous]\naddr = %s\n' "$BRIDGE_ADDR"
        printf '[ssh]\nport = %s\nidentity = %s\nknown_hosts = %s\nconnect_timeout = 3\n' \
            "$SSHD_PORT" "$SSH_IDENTITY" "$work/netns/known_hosts"
        printf '[engine]\nzero_stage = 2\n[logs]\ntee = none\n'
        printf '[restart]\nmax_restarts = 1\nbackoff = 0\nnode_retries = 1\n'
        [[ $kind == hang ]] && printf 'hang_timeout = 2\n'
    } > "$dir/job.ini"
    "$dslaunch" "$dir/job.ini" > "$dir/out" 2> "$dir/err" &
    dl=$!
    local logs=$dir/logs/$name/latest
    local end=$((SECONDS + 60))
    until grep -q "^step *10/" "$logs/attempt-0/rank-0.out" 2>/dev/null; do
        ((SECONDS < end)) || { echo "bench_recovery: $name never trained" >&2; cat "$dir/err" >&2; exit 1; }
        sleep 0.01
    done
    local pids
    pids=$(sed -n 's/.*"message":"rank [0-9]* on [^:]*: started, pid \([0-9]*\)".*/\1/p' "$logs/launcher.log")
    local victim
    victim=$(sed -n 's/.*"message":"rank 1 on [^:]*: started, pid \([0-9]*\)".*/\1/p' "$logs/launcher.log")
    local t0
    case $kind in
    worker) t0=$(now); kill -KILL "$victim" ;;
    hang) t0=$(now); kill -STOP "$victim" ;;
    agent)
        local agent
        agent=$(sed -n 's/.*"message":"node 1 ([^)]*): agent up, pid \([0-9]*\);.*/\1/p' "$logs/launcher.log")
        t0=$(now); kill -KILL "$agent" ;;
    node)
        local nodepids
        nodepids=$(ip netns pids "$tag-2")
        t0=$(now)
        # shellcheck disable=SC2086
        kill -KILL $nodepids ;;
    esac
    local t_stop="" t_res=""
    end=$((SECONDS + 60))
    while [[ -z $t_res ]]; do
        ((SECONDS < end)) || { echo "bench_recovery: $name did not recover" >&2; cat "$dir/err" >&2; exit 1; }
        # shellcheck disable=SC2086
        [[ -z $t_stop ]] && ! any_alive $pids && t_stop=$(now)
        if [[ -f $logs/attempt-1/rank-0.out ]] && grep -q "^step " "$logs/attempt-1/rank-0.out"; then
            t_res=$(now)
        fi
        sleep 0.002
    done
    [[ -n $t_stop ]] || { echo "bench_recovery: $name resumed before its first attempt's ranks were gone" >&2; exit 1; }
    kill -INT "$dl"
    wait "$dl" || true
    dl=""
    stopped_s=$(secs "$t0" "$t_stop")
    resumed_s=$(secs "$t0" "$t_res")
    # the killed node comes back for the next run
    if [[ $kind == node ]]; then
        "$root/tests/integration/restart/netns.sh" up "$tag" 3 "$work/sshd" "$work/netns"
    fi
}

machine=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
for kind in ${KINDS:-worker agent node hang}; do
    ss=() rs=()
    for rep in $(seq "$reps"); do
        run "$kind" "rec-$kind-$rep"
        ss+=("$stopped_s")
        rs+=("$resumed_s")
    done
    smed=$(printf '%s\n' "${ss[@]}" | median); smin=$(printf '%s\n' "${ss[@]}" | sort -n | head -1)
    rmed=$(printf '%s\n' "${rs[@]}" | median); rmin=$(printf '%s\n' "${rs[@]}" | sort -n | head -1)
    hang=null
    [[ $kind == hang ]] && hang=2
    printf '{"bench":"recovery","kind":"%s","nodes":2,"ranks":4,"reps":%d,"kill_to_stopped_s_median":%s,"kill_to_stopped_s_min":%s,"kill_to_resumed_s_median":%s,"kill_to_resumed_s_min":%s,"hang_timeout_s":%s,"stop_grace_s":3,"cpu":"%s","cores":%d}\n' \
        "$kind" "$reps" "$smed" "$smin" "$rmed" "$rmin" "$hang" "$machine" "$(nproc)"
done
