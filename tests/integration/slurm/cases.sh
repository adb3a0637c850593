#!/usr/bin/env bash
# dslaunch in a real Slurm: cases.sh CASE (CMakeLists.txt lists them). Needs DSLAUNCH,
# DSRUN, SOURCE_DIR, CLUSTER_DIR (cluster.sh start), SSHD_DIR (sshd.sh start, for the
# reference run) and WORK. Every case runs a job with a name unique to this run and then
# checks that nothing of it is left: no agent, rank or child of a rank, and no slurmstepd
# of its Slurm job.
set -uo pipefail

case_name=${1:?usage: cases.sh CASE}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/job.sh"
name="sl-${case_name//_/-}-$$"
job="$WORK/$name"
rm -rf "$job"
mkdir -p "$job"
cp "$SOURCE_DIR"/tests/integration/launch/scripts/*.lua "$job/"
[[ -f $CLUSTER_DIR/env ]] && . "$CLUSTER_DIR/env" && export SLURM_CONF
bg_pids=()
slurm_jobs=()

cleanup() {
    for p in "${bg_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    for j in "${slurm_jobs[@]}"; do scancel --quiet "$j" 2>/dev/null; done
    for p in $(job_pids); do kill -KILL "$p" 2>/dev/null; done
}
trap cleanup EXIT

fail() {
    echo "FAIL [$case_name]: $*" >&2
    for f in "$job"/out "$job"/err "$job"/logs/"$name"/latest/launcher.log "$job"/logs/"$name"/latest/attempt-0/srun.log; do
        [[ -f $f ]] && { echo "--- $f" >&2; tail -n 40 "$f" >&2; }
    done
    exit 1
}

# slurmstepd processes of Slurm job $1 (their title is "slurmstepd: [JOB.STEP]").
stepd_pids() { pgrep -f "^slurmstepd: \[$1\." || true; }

has() { grep -aq -- "$2" "$1" 2>/dev/null; }
logs="$job/logs/$name/latest/attempt-0"
no_job_processes() { [[ -z $(job_pids) ]]; }
assert_nothing_left() {
    # An agent cut off from its controller gives its ranks the grace period (3 s), then KILL.
    wait_for 10 "every process of $name to be gone ($(job_pids | tr '\n' ' '))" no_job_processes
    for j in "${slurm_jobs[@]}"; do
        no_stepd() { [[ -z $(stepd_pids "$j") ]]; }
        wait_for 15 "every slurmstepd of Slurm job $j to be gone" no_stepd
    done
}

# write_job SCRIPT [ini lines...]: a job for the allocation's nodes; node names are not
# host names here, so the store and Gloo bind to loopback.
write_job() {
    local script=$1
    shift
    {
        printf '[job]\nname = %s\nscript = %s\ndsrun = %s\n' "$name" "$script" "$DSRUN"
        printf '[rendezvous]\naddr = 127.0.0.1\n[env]\nDS_NODE_ADDR = 127.0.0.1\n'
        for line in "$@"; do printf '%s\n' "$line"; done
    } > "$job/job.ini"
}

# salloc_bg [salloc options...]: dslaunch under salloc in the background.
salloc_bg() {
    salloc --job-name="$name" "$@" "$DSLAUNCH" "$job/job.ini" > "$job/out" 2> "$job/err" &
    dl_pid=$!
    bg_pids+=("$dl_pid")
    get_id() { slurm_id=$(squeue -h -n "$name" -o %i | head -1); [[ -n $slurm_id ]]; }
    wait_for 20 "the allocation" get_id
    slurm_jobs+=("$slurm_id")
}

wait_bg() {
    local secs=$1 end=$((SECONDS + $1))
    while kill -0 "$dl_pid" 2>/dev/null; do
        ((SECONDS >= end)) && fail "dslaunch did not end within $secs s"
        sleep 0.05
    done
    wait "$dl_pid"
    rc=$?
}

# sbatch_job [sbatch options...]: dslaunch in a batch script; its output in $job/out.
sbatch_job() {
    slurm_id=$(sbatch --parsable --job-name="$name" -o "$job/out" -e "$job/err" "$@" \
        --wrap "exec $DSLAUNCH $job/job.ini") || fail "sbatch refused the job"
    slurm_jobs+=("$slurm_id")
}
slurm_job_gone() { [[ -z $(squeue -h -j "$slurm_id" 2>/dev/null) ]]; }

# The pid of the agent srun started on Slurm node $1.
agent_on() {
    pgrep -f "agent --job $name-[0-9a-f]* --srun" | while read -r p; do
        tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "SLURMD_NODENAME=$1" && echo "$p"
    done
}

all_ready() { for r in $(seq 0 $(($1 - 1))); do has "$logs/rank-$r.out" "ready $r" || return 1; done; }

# ---- the example model: the SSH path's losses, then the same job under Slurm ----

# gpt_job: examples/gpt/job.ini as shipped (ZeRO-3, its [engine] section), small
# settings, one rank per node, the training data made once in $WORK/data.
gpt_job() {
    [[ -f $WORK/data/train.tok ]] || "$DSRUN" run "$SOURCE_DIR/examples/gpt/make_data.lua" dir="$WORK/data" kb=100 > /dev/null ||
        fail "make_data.lua failed"
    sed -e "s|^name = .*|name = $name|" \
        -e "s|^args = .*|args = tiny.lua data=$WORK/data/train.tok model.vocab=257 model.context=64 model.d=64 steps=30 log_every=5|" \
        -e "s|^\[job\]$|[job]\nworkdir = $SOURCE_DIR/examples/gpt\ndsrun = $DSRUN|" \
        -e "/^num_gpus = /d" \
        "$SOURCE_DIR/examples/gpt/job.ini" > "$job/job.ini"
    printf '[rendezvous]\naddr = 127.0.0.1\n[env]\nDS_NODE_ADDR = 127.0.0.1\n' >> "$job/job.ini"
    printf '[logs]\ndir = %s/logs\n' "$job" >> "$job/job.ini"
    for line in "$@"; do printf '%s\n' "$line" >> "$job/job.ini"; done
    grep -q "^zero_stage = 3$" "$job/job.ini" || fail "the example job is no longer ZeRO-3"
}

# Rank 0's logged steps without the speed and memory columns.
losses() { grep -a "^step " "$logs/rank-0.out" | cut -d'|' -f1-4; }

check_losses() {
    losses > "$job/losses"
    [[ $(wc -l < "$job/losses") -ge 6 ]] || fail "rank 0 logged $(wc -l < "$job/losses") steps, expected 6"
    diff "$WORK/ref.losses" "$job/losses" > "$job/diff" || fail "losses differ from the SSH path's:
$(cat "$job/diff")"
    echo "$(tail -1 "$job/losses") (the SSH path's, exactly)"
}

case_ssh_reference() {
    . "$SSHD_DIR/env"
    printf '127.0.0.2 slots=1\n127.0.0.3 slots=1\n127.0.0.4 slots=1\n' > "$job/hosts"
    gpt_job "[resources]" "hostfile = $job/hosts" "[ssh]" "port = $SSHD_PORT" "identity = $SSH_IDENTITY" \
        "known_hosts = $SSH_KNOWN_HOSTS"
    env -u SLURM_JOB_ID timeout -s KILL 150 "$DSLAUNCH" "$job/job.ini" > "$job/out" 2> "$job/err"
    rc=$?
    [[ $rc == 0 ]] || fail "the SSH run exited $rc"
    has "$job/logs/$name/latest/launcher.log" "connecting over SSH" || fail "the reference did not run over SSH"
    losses > "$WORK/ref.losses"
    [[ $(wc -l < "$WORK/ref.losses") -ge 6 ]] || fail "rank 0 logged too few steps"
    echo "reference: $(tail -1 "$WORK/ref.losses")"
}

# 3 nodes under salloc: hosts and slots from the allocation, agents through srun.
case_salloc_trains() {
    gpt_job
    salloc_bg -N3 --ntasks-per-node=1
    wait_bg 150
    [[ $rc == 0 ]] || fail "exit status $rc"
    has "$job/logs/$name/latest/launcher.log" "srun step: srun " || fail "the agents did not start through srun"
    ! has "$job/logs/$name/latest/launcher.log" "SSH" || fail "something went over SSH"
    for n in 1 2 3; do has "$logs/srun.log" "(n$n) joined" || fail "node n$n did not join"; done
    check_losses
    assert_nothing_left
}

# The same job as a batch script.
case_sbatch_trains() {
    gpt_job
    sbatch_job -N3 --ntasks-per-node=1
    wait_for 150 "the batch job to end" slurm_job_gone
    has "$job/err" "all 3 ranks exited 0" || fail "the batch job did not succeed"
    check_losses
    assert_nothing_left
}

# ---- where hosts and slots come from ----

case_dry_run() {
    write_job hello.lua
    salloc --job-name="$name" -N3 --ntasks-per-node=2 "$DSLAUNCH" --dry-run "$job/job.ini" > "$job/out" 2> "$job/err" ||
        fail "--dry-run failed"
    plan=$(tr -d ' \n' < "$job/out")
    [[ $plan == *'"launch":"srun"'* ]] || fail "the plan does not say srun"
    [[ $plan == *'"hosts_from":"slurmjob'*':SLURM_JOB_NODELIST=n[1-3];CPUslotsfromSLURM_TASKS_PER_NODE=2(x3)"'* ]] ||
        fail "the plan does not say where the hosts came from"
    [[ $plan == *'"world_size":6,'* ]] || fail "expected 6 ranks (3 nodes x 2 tasks)"
    for n in 1 2 3; do [[ $plan == *"{\"host\":\"n$n\",\"node_rank\":$((n - 1)),\"slots\":[0,1]"* ]] || fail "node n$n"; done
    # the filters apply to the allocation's nodes
    salloc -N3 "$DSLAUNCH" --dry-run --exclude n2 "$job/job.ini" > "$job/out" 2>> "$job/err" || fail "--exclude n2 failed"
    [[ $(grep -o '"host": "n[0-9]"' "$job/out" | sort -u | tr -d '\n') == '"host": "n1""host": "n3"' ]] ||
        fail "--exclude n2 did not leave n1 and n3"
    salloc -N3 "$DSLAUNCH" --dry-run --num_nodes 2 --num_gpus 3 "$job/job.ini" > "$job/out" 2>> "$job/err" ||
        fail "--num_nodes 2 failed"
    [[ $(tr -d ' \n' < "$job/out") == *'"world_size":6,'* ]] || fail "--num_nodes 2 --num_gpus 3: expected 6 ranks"
    # outside an allocation, source = slurm is an error that says why
    printf '[resources]\nsource = slurm\n' >> "$job/job.ini"
    env -u SLURM_JOB_ID "$DSLAUNCH" --dry-run "$job/job.ini" > "$job/out" 2> "$job/err"
    [[ $? == 2 ]] || fail "source = slurm outside an allocation: expected exit status 2"
    has "$job/err" "not inside a Slurm allocation" || fail "the error does not say why"
}

# Slots are the allocation's GPUs, and a rank's CUDA_VISIBLE_DEVICES is the step's k-th
# device (Slurm may renumber or hand out a subset). No GPU is touched: the script only
# prints its variables. SLURM_JOB_GPUS stands for GPUs this cluster does not have.
case_gpu_slots() {
    cat > "$job/env.lua" <<'LUA'
print(string.format('rank %s cuda %s', os.getenv('RANK'), os.getenv('CUDA_VISIBLE_DEVICES')))
LUA
    write_job env.lua
    timeout -s KILL 60 salloc --job-name="$name" -N2 env SLURM_JOB_GPUS=0,1 CUDA_VISIBLE_DEVICES=5,7 \
        "$DSLAUNCH" "$job/job.ini" > "$job/out" 2> "$job/err" || fail "the job failed"
    for r in 0 2; do grep -q "^\[n[12]:$r\] rank $r cuda 5$" "$job/out" || fail "rank $r is not on the step's device 5"; done
    for r in 1 3; do grep -q "^\[n[12]:$r\] rank $r cuda 7$" "$job/out" || fail "rank $r is not on the step's device 7"; done
    assert_nothing_left
}

# ---- the link ----

# A connection to the link without the job's token, or that does not speak the
# protocol, is dropped and reported; the job goes on.
case_bad_join() {
    write_job token.lua "[env]" "FLAG_FILE = $job/flag"
    salloc_bg -N2
    waiting() { for r in 0 1; do has "$logs/rank-$r.out" "waiting $r" || return 1; done; }
    wait_for 30 "every rank to be waiting" waiting
    link=$(sed -n 's/.*agents join at \([0-9.]*\):\([0-9]*\).*/\1 \2/p' "$job/logs/$name/latest/launcher.log")
    [[ -n $link ]] || fail "launcher.log does not say where agents join"
    set -- $link
    # a JOIN frame (type 18, rank 0, payload length) with a wrong token; then no frame at all
    payload="$(printf 'f%.0s' $(seq 64)) n1 0 1.0"
    join=$(printf '\\x12\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x%02x%s' ${#payload} "$payload")
    for bytes in "$join" "GET / HTTP/1.0\r\n\r\n"; do
        exec {fd}<>/dev/tcp/$1/$2 || fail "cannot reach the link at $1:$2"
        printf "$bytes" >&$fd
        # closed: at EOF, or reset (the link closes with our bytes unread); kept: timeout's 124
        local read_rc=0
        timeout 5 cat <&$fd > /dev/null 2>&1 || read_rc=$?
        ((read_rc != 124)) || fail "the link kept a connection that sent: $bytes"
        exec {fd}>&-
    done
    touch "$job/flag"
    wait_bg 30
    [[ $rc == 0 ]] || fail "exit status $rc: the job must be unaffected"
    has "$logs/srun.log" "refused a link from 127.0.0.1:[0-9]*: wrong token" || fail "srun.log lacks the wrong token"
    has "$logs/srun.log" "refused a link from 127.0.0.1:[0-9]*: not a JOIN" || fail "srun.log lacks the stranger"
    has "$job/err" "srun link: refused a connection from" || fail "the refusal is not on the terminal"
    for r in 0 1; do has "$logs/rank-$r.out" "done $r" || fail "rank $r did not finish"; done
    assert_nothing_left
}

# ---- stopping ----

# scancel of a batch job: Slurm signals every process of the job; the controller says
# so, and nothing is left.
case_scancel() {
    write_job spin.lua
    sbatch_job -N3
    wait_for 30 "every rank to be running" all_ready 3
    scancel "$slurm_id"
    wait_for 30 "the batch job to end" slurm_job_gone
    has "$job/err" "Slurm sent SIGTERM to the job's processes" || has "$job/err" "interrupted by SIGTERM" ||
        fail "dslaunch does not report the cancellation"
    has "$job/err" "FAILED" || fail "no summary"
    assert_nothing_left
}

# The scheduler's warning (sbatch --signal=USR1@T; here scancel -s USR1, which signals
# every process of the job's steps): it reaches the controller through the agents, and no
# rank dies of it. spin.lua never asks whether to drain, so the controller stops the job
# (the requeue case below drains one that does).
case_usr1() {
    write_job spin.lua
    salloc_bg -N3
    wait_for 30 "every rank to be running" all_ready 3
    scancel -s USR1 "$slurm_id"
    wait_bg 30
    has "$job/logs/$name/latest/launcher.log" "its agent got SIGUSR1" || fail "no agent reported SIGUSR1"
    has "$job/err" "SIGUSR1" || fail "the controller did not act on SIGUSR1"
    ! grep -Eq "(killed|stopped) by signal 10" "$job/err" || fail "a rank died of SIGUSR1"
    assert_nothing_left
}

# Requeue (docs/slurm.md): a batch job submitted with --requeue whose script requeues
# itself when dslaunch exits 3 (drained). Slurm's warning (scancel -s USR1, as
# --signal=USR1@T sends it) while every rank waits after step 5: the ranks drain at step 5
# and save it, dslaunch exits 3, the script requeues the job, and Slurm runs it again under
# the same job id (the test cluster lets a requeued job start after about 6 s instead of
# 121: cluster.sh); that run resumes at step 5 and trains to the end.
case_requeue() {
    cp "$SOURCE_DIR/tests/integration/restart/scripts/train_hook.lua" "$job/"
    cat > "$job/tiny.lua" <<EOF
return {model = {vocab = 32, context = 16, d = 32, layers = 2, heads = 2},
        batch = 4, steps = 8, warmup = 2, log_every = 1, save_every = 3, ckpt = 'ck'}
EOF
    write_job train_hook.lua "TRAIN_LUA = $SOURCE_DIR/examples/gpt/train.lua" \
        "PAUSE_AT_STEP = 5" "PAUSE_UNTIL = $job/go"
    sed -i "s|^script = .*|&\nargs = tiny.lua|" "$job/job.ini"
    cat > "$job/batch.sh" <<EOF
#!/bin/bash
$DSLAUNCH $job/job.ini
rc=\$?
echo "dslaunch exited \$rc (restart count \${SLURM_RESTART_COUNT:-0})"
if [ "\$rc" -eq 3 ]; then scontrol requeue "\$SLURM_JOB_ID"; fi
exit "\$rc"
EOF
    slurm_id=$(sbatch --parsable --job-name="$name" --requeue -N3 --ntasks-per-node=1 \
        --open-mode=append -o "$job/out" -e "$job/err" "$job/batch.sh") || fail "sbatch refused the job"
    slurm_jobs+=("$slurm_id")
    paused() { for r in 0 1 2; do has "$logs/rank-$r.out" "paused at step 5" || return 1; done; }
    wait_for 60 "every rank to pause at step 5" paused
    scancel -s USR1 "$slurm_id"
    draining() { has "$job/logs/$name/latest/launcher.log" "draining on SIGUSR1"; }
    wait_for 20 "dslaunch to begin draining" draining
    touch "$job/go"
    drained() { has "$job/out" "dslaunch exited"; }
    wait_for 60 "the first run to end" drained
    has "$job/out" "dslaunch exited 3 (restart count 0)" || fail "the first run did not exit 3 (drained)"
    has "$job/err" "drained at step 5 on SIGUSR1" || fail "the summary does not say where it drained"
    finished() { has "$job/out" "(restart count 1)"; }
    wait_for 90 "the requeued run to end" finished
    has "$job/out" "dslaunch exited 0 (restart count 1)" || fail "the requeued run did not succeed"
    has "$job/logs/$name/latest/attempt-0/rank-0.out" "resumed from ck at step 5" ||
        fail "the requeued run did not resume at step 5"
    [[ $(cat "$job/ck/latest") == step-8 ]] || fail "the last checkpoint is $(cat "$job/ck/latest"), expected step-8"
    wait_for 30 "the batch job to end" slurm_job_gone
    assert_nothing_left
}

# A restart under Slurm is a new srun step in the same allocation: attempt 0's rank 1 exits
# 3, the controller ends that step and starts attempt 1 as a step of its own, which succeeds.
case_restart() {
    cp "$SOURCE_DIR/tests/integration/restart/scripts/flaky.lua" "$job/"
    write_job flaky.lua "[restart]" "max_restarts = 1" "backoff = 0"
    salloc_bg -N3
    wait_bg 90
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0 after the restart"
    local run="$job/logs/$name/latest"
    [[ $(grep -c "srun step: srun " "$run/launcher.log") == 2 ]] || fail "expected one srun step per attempt"
    for a in 0 1; do [[ -s $run/attempt-$a/srun.log ]] || fail "attempt $a has no srun.log"; done
    for r in 0 1 2; do has "$run/attempt-1/rank-$r.out" "rank $r done" || fail "rank $r did not finish in attempt 1"; done
    has "$job/err" "rank 1 on n2 exited with code 3" || fail "the root cause is not rank 1 on n2"
    assert_nothing_left
}

# An agent killed: srun's --kill-on-bad-exit ends the step, the controller names the node.
case_agent_killed() {
    write_job spin.lua
    salloc_bg -N3
    wait_for 30 "every rank to be running" all_ready 3
    agent=$(agent_on n2)
    [[ -n $agent ]] || fail "cannot find n2's agent"
    kill -KILL $agent
    wait_bg 30
    [[ $rc != 0 ]] || fail "exit status 0 after an agent died"
    has "$job/err" "node 1 (n2)" || fail "the summary does not name n2"
    assert_nothing_left
}

# dslaunch killed: srun gets SIGTERM (its parent died) and cancels the step; every
# agent sees its link drop. Nothing of the job survives.
case_controller_killed() {
    write_job spin.lua
    salloc_bg -N3
    wait_for 30 "every rank to be running" all_ready 3
    pkill -KILL -f "^$DSLAUNCH $job/job.ini" || fail "cannot find dslaunch"
    assert_nothing_left
}

# An agent that stops heartbeating (SIGSTOP) is lost after heartbeat_timeout. It cannot
# act on its closed link, so the teardown cancels the step, and Slurm kills it.
case_heartbeat_lost() {
    write_job spin.lua "[restart]" "heartbeat_interval = 0.2" "heartbeat_timeout = 1"
    salloc_bg -N3
    wait_for 30 "every rank to be running" all_ready 3
    agent=$(pgrep -f "agent --job $name-[0-9a-f]* --srun" | while read -r p; do
        tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx SLURMD_NODENAME=n2 && echo "$p"; done)
    [[ -n $agent ]] || fail "cannot find n2's agent"
    kill -STOP $agent
    wait_bg 40
    [[ $rc != 0 ]] || fail "exit status 0 after a node went silent"
    has "$job/err" "node 1 (n2): no heartbeat for" || fail "the summary does not name the silent node"
    has "$logs/srun.log" "cancelling the step" || fail "the step was not cancelled"
    assert_nothing_left
}

# A node's slurmd dies: Slurm declares the node failed (SlurmdTimeout 3 s here) and srun
# says so; the controller ends that node as lost, stops the job and names it. The agent
# on the failed node, which Slurm can no longer reach, stops when its link closes.
case_slurmd_killed() {
    write_job spin.lua
    salloc_bg --no-kill -N3
    wait_for 30 "every rank to be running" all_ready 3
    kill -KILL "$(cat "$CLUSTER_DIR/run/slurmd-n2.pid")"
    start=$SECONDS
    wait_bg 60
    echo "dslaunch ended $((SECONDS - start)) s after n2's slurmd was killed"
    [[ $rc != 0 ]] || fail "exit status 0 after a node failed"
    has "$job/err" "node 1 (n2): .*Slurm reports a node failure" || fail "n2 is not reported lost"
    assert_nothing_left
    "$here/cluster.sh" restart-node "$CLUSTER_DIR" 2 || fail "n2 did not come back"
}

"case_$case_name"
[[ -n ${KEEP_WORK:-} ]] || rm -rf "$job"
echo "PASS [$case_name]"
