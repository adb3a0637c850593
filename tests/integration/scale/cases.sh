#!/usr/bin/env bash
# A simulated cluster in CI (docs/scale.md): NODES agents on this machine, each a node of
# its own (127.0.x.y, [launch] method = local), each with RANKS light ranks (sim_rank).
#   cases.sh clean        the job starts, every rank passes its barriers, it ends cleanly
#   cases.sh node_killed  while every rank holds: the store has one connection per node
#                         (not per rank), the controller's descriptors do not grow with
#                         ranks; then one node's agent is killed: the job sees it, stops,
#                         and leaves no process behind
#   cases.sh barrier_requests  a barrier costs the store about one request per node, not
#                         per rank (its agent joins the node's ranks); 32 nodes
#   cases.sh barrier_timeout   a rank that never comes: the others time out and say how
#                         many arrived and who is missing, through their agents; 4 nodes
#   cases.sh wait_requests  every rank sets its key and waits for all (a communicator's
#                         rendezvous): the store sees about one WAIT per node; 32 nodes
#   cases.sh relay_clean  past [launch] relay_threshold (64 x 4, 8 relays of 8 nodes):
#                         the job starts through relays and ends cleanly, every rank's
#                         log arrives
#   cases.sh relay_killed while every rank holds: the controller's children are its 8
#                         relays, not 64 agents; one relay is killed: the job fails
#                         naming that relay's host and nodes, and leaves nothing behind
# Needs DSLAUNCH, DSRUN, SIM_RANK and WORK in the environment; NODES and RANKS default to
# 128 and 8.
set -uo pipefail
case_name=${1:?usage: cases.sh CASE}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/job.sh"
nodes=${NODES:-128}
ranks=${RANKS:-8}
name="sc-${case_name//_/-}-$$"
job="$WORK/$name"
[[ -n ${KEEP_WORK:-} ]] || rm -rf "$job"
mkdir -p "$job"
dl_pid=

cleanup() {
    [[ -n $dl_pid ]] && kill -KILL "$dl_pid" 2>/dev/null
    for p in $(job_pids); do kill -KILL "$p" 2>/dev/null; done
}
trap cleanup EXIT

fail() {
    echo "FAIL [$case_name]: $*" >&2
    for f in "$job"/err "$job"/logs/"$name"/latest/launcher.log; do
        [[ -f $f ]] && { echo "--- $f" >&2; tail -n 30 "$f" >&2; }
    done
    exit 1
}

# write_job NODES RANKS [LAUNCH_KEY...]: hosts and job.ini for the simulated cluster.
write_job() {
    local extra="" k
    for k in "${@:3}"; do extra+="$k"$'\n'; done
    for ((i = 0; i < $1; i++)); do echo "127.0.$((i / 250)).$((i % 250 + 2)) slots=$2"; done > "$job/hosts"
    printf '[job]\nname = %s\nscript = %s\ndsrun = %s\n[resources]\nhostfile = hosts\n[launch]\nmethod = local\n%s[logs]\ntee = none\n' \
        "$name" "$SIM_RANK" "$DSRUN" "$extra" > "$job/job.ini"
}

start_job() {
    DS_TEST_WORKER_EXE=$SIM_RANK "$DSLAUNCH" "$job/job.ini" > "$job/out" 2> "$job/err" &
    dl_pid=$!
}

# Waits (bounded) for dslaunch to end; sets rc.
wait_job() {
    local end=$((SECONDS + $1))
    while kill -0 "$dl_pid" 2>/dev/null; do
        ((SECONDS >= end)) && fail "dslaunch did not end within $1 s"
        sleep 0.1
    done
    wait "$dl_pid"
    rc=$?
    dl_pid=
}

logs() { echo "$job/logs/$name/latest/attempt-0"; }
past_barrier() { grep -qs '^past ' "$(logs)/rank-0.out"; }
no_job_processes() { [[ -z $(job_pids) ]]; }

# Established TCP connections to the store (its port from launcher.log).
store_connections() {
    local port
    port=$(sed -n 's/.*store listening on [^"]*:\([0-9]*\)".*/\1/p' "$job/logs/$name/latest/launcher.log" | head -1)
    [[ -n $port ]] || fail "no store port in launcher.log"
    awk -v p="$(printf '%04X' "$port")" '$4 == "01" { split($2, a, ":"); if (a[2] == p) n++ } END { print n + 0 }' \
        /proc/net/tcp /proc/net/tcp6
}

# The pid of node N's agent (one pgrep: a loop over a thousand processes is slow).
agent_pid() { pgrep -f -- " agent --job $name-[0-9a-f]{8} --node $1\$"; }

case_clean() {
    write_job "$nodes" "$ranks"
    SIM_BARRIERS=3 start_job
    wait_job 150
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0"
    grep -q "all $((nodes * ranks)) ranks exited 0" "$job/err" || fail "the summary does not say every rank exited 0"
    local n
    n=$(grep -ls '^past ' "$(logs)"/rank-*.out | wc -l)
    [[ $n == $((nodes * ranks)) ]] || fail "$n of $((nodes * ranks)) ranks passed the first barrier"
    wait_for 5 "every process of $name to be gone" no_job_processes
}

# Requests the store served (launcher.log's "store served" line), heartbeats and CHECKs
# left out: how often agents heartbeat and poll for the master port (CHECK) depends on
# timing, not on barriers.
served() {
    local line
    line=$(grep -o 'store served [^"]*' "$job/logs/$name/latest/launcher.log") || fail "no 'store served' line in launcher.log"
    echo "$line" >&2
    awk -v l="$line" 'function count(op) { match(l, op " [0-9]+"); return substr(l, RSTART + length(op) + 1, RLENGTH - length(op) - 1) }
                      BEGIN { split(l, w, " "); print w[3] - count("heartbeat") - count("check") }'
}

case_barrier_requests() {
    nodes=32
    local few many
    write_job "$nodes" "$ranks"
    SIM_BARRIERS=1 start_job
    wait_job 120
    [[ $rc == 0 ]] || fail "exit status $rc with 1 barrier"
    few=$(served)
    rm -rf "$job/logs"
    SIM_BARRIERS=11 start_job
    wait_job 120
    [[ $rc == 0 ]] || fail "exit status $rc with 11 barriers"
    many=$(served)
    local per=$(((many - few) * 100 / (10 * nodes)))
    echo "store requests per barrier: $((many - few)) / 10 = $(((many - few) / 10)) for $nodes nodes x $ranks ranks ($per% of one per node)"
    # One per node joined by its agent; rank by rank it would be 800% (4,000% as five
    # requests per rank).
    ((per >= 80 && per <= 150)) || fail "$per% of one store request per node per barrier (80-150% expected)"
}

case_wait_requests() {
    nodes=32
    write_job "$nodes" "$ranks"
    SIM_RENDEZVOUS=1 start_job
    wait_job 120
    [[ $rc == 0 ]] || fail "exit status $rc"
    served > /dev/null
    local waits
    waits=$(grep -o 'store served [^"]*' "$job/logs/$name/latest/launcher.log" | sed -n 's/.* wait \([0-9]*\),.*/\1/p')
    echo "WAIT requests at the store: $waits for $nodes nodes x $ranks ranks"
    # Joined on each node: one, and one more from a rank whose WAIT came after the
    # node's was answered. Rank by rank it would be $((nodes * ranks)).
    ((waits >= 1 && waits <= 2 * nodes)) || fail "$waits WAIT requests for $nodes nodes (1 to $((2 * nodes)) expected)"
}

case_barrier_timeout() {
    nodes=4
    write_job "$nodes" "$ranks"
    printf '[rendezvous]\ntimeout = 4\n' >> "$job/job.ini" # ranks get it as DS_RDZV_TIMEOUT_MS
    SIM_ABSENT=13 start_job
    wait_job 60
    [[ $rc != 0 ]] || fail "the job succeeded although rank 13 never came to the barrier"
    # Whichever rank timed out first ended the job; the ranks of the nodes that held
    # their arrivals (all but rank 13's) are counted as arrived.
    local want="timed out after 4 s \(rank [0-9]+\): $((nodes * ranks - 1)) of $((nodes * ranks)) ranks arrived; missing rank 13\$"
    grep -qE "$want" "$(logs)"/rank-*.err ||
        fail "no rank said '$want'; they said: $(cat "$(logs)"/rank-*.err | head -c 600)"
    wait_for 10 "every process of $name to be gone" no_job_processes
}

case_node_killed() {
    write_job "$nodes" "$ranks"
    SIM_HOLD=1 start_job
    wait_for 150 "every rank past the first barrier" past_barrier
    # Every rank is in the job, holding its store client.
    local conns fds victim=$((nodes / 2 + 1)) pid
    conns=$(store_connections)
    fds=$(ls "/proc/$dl_pid/fd" | wc -l)
    echo "nodes=$nodes ranks_per_node=$ranks store_connections=$conns controller_fds=$fds"
    ((conns >= nodes && conns <= nodes + 4)) || fail "$conns store connections for $nodes nodes (expected nodes + at most 4)"
    # Per node: the agent's three pipes and its store connection; per rank: nothing held
    # open (rank log files are opened on demand, at most 64 at a time).
    ((fds <= 4 * nodes + 64 + 64)) ||
        fail "$fds descriptors open in the controller for $nodes nodes x $ranks ranks (4 per node + 128 allowed)"
    pid=$(agent_pid "$victim")
    [[ -n $pid ]] || fail "no agent of node $victim"
    kill -KILL "$pid"
    wait_job 60
    [[ $rc != 0 ]] || fail "the job succeeded although node $victim was killed"
    grep -q "node $victim " "$job/err" || fail "the summary does not name node $victim"
    wait_for 10 "every process of $name to be gone ($(job_pids | wc -l) left)" no_job_processes
}

# The relay cases: 64 nodes past a threshold of 16, so ⌈√64⌉ = 8 relays of 8 nodes.
relay_nodes=${NODES:-64}
relay_ranks=${RANKS:-4}
relays() { local f=1; while ((f * f < relay_nodes)); do ((f++)); done; echo $(((relay_nodes + f - 1) / f)); }
all_past() { [[ $(grep -ls '^past ' "$(logs)"/rank-*.out | wc -l) == $((relay_nodes * relay_ranks)) ]]; }
children() { grep -ls "^PPid:[[:space:]]*$dl_pid\$" /proc/[0-9]*/status | wc -l; }

case_relay_clean() {
    write_job "$relay_nodes" "$relay_ranks" "relay_threshold = 16"
    SIM_BARRIERS=3 start_job
    wait_job 100
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0"
    grep -q "through $(relays) relays" "$job/logs/$name/latest/launcher.log" || fail "launcher.log does not say $(relays) relays"
    grep -q "all $((relay_nodes * relay_ranks)) ranks exited 0" "$job/err" || fail "the summary does not say every rank exited 0"
    all_past || fail "$(grep -ls '^past ' "$(logs)"/rank-*.out | wc -l) of $((relay_nodes * relay_ranks)) rank logs arrived"
    wait_for 5 "every process of $name to be gone" no_job_processes
}

case_relay_killed() {
    write_job "$relay_nodes" "$relay_ranks" "relay_threshold = 16"
    SIM_HOLD=1 start_job
    wait_for 100 "every rank past the first barrier" all_past
    local kids fds pids victim host
    kids=$(children)
    fds=$(ls "/proc/$dl_pid/fd" | wc -l)
    echo "nodes=$relay_nodes relays=$(relays) controller_children=$kids controller_fds=$fds"
    [[ $kids == $(relays) ]] || fail "the controller has $kids children, expected its $(relays) relays"
    pids=$(pgrep -f -- "--relay --job $name-[0-9a-f]{8}\$" | wc -l)
    [[ $pids == $(relays) ]] || fail "$pids relay processes, expected $(relays)"
    # the third relay: nodes 16-23, on the host of node 16
    host=$(sed -n 17p "$job/hosts" | cut -d' ' -f1)
    victim=$(sed -n "s/.*relay 2 on $host (nodes 16-23): started locally, pid \([0-9]*\).*/\1/p" \
             "$job/logs/$name/latest/launcher.log")
    [[ -n $victim ]] || fail "launcher.log does not say where relay 2 runs"
    kill -KILL "$victim"
    wait_job 60
    [[ $rc != 0 ]] || fail "the job succeeded although a relay was killed"
    grep -q "relay (dslaunch --relay on $host, pid $victim, for nodes 16-23)" "$job/err" ||
        fail "the summary does not name the relay on $host and its nodes 16-23"
    wait_for 10 "every process of $name to be gone ($(job_pids | wc -l) left)" no_job_processes
}

"case_$case_name"
[[ -n ${KEEP_WORK:-} ]] || rm -rf "$job"
echo "PASS [$case_name]"
