#!/usr/bin/env bash
# Supervision cases: cases.sh CASE (see CMakeLists.txt for the list). Same environment
# and helpers as the launch cases (../launch/lib.sh). Jobs run on this node (fork/exec)
# unless a case needs SSH: restarts are the controller's business, not the transport's.
set -uo pipefail

case_name=${1:?usage: cases.sh CASE}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../launch/lib.sh"
run_dir="$job/logs/$name/latest"

# write_local_job SCRIPT RANKS [extra ini lines...]: a job of RANKS ranks on this node
# ($JOB_ARGS, when set, are the script's arguments).
write_local_job() {
    local script=$1 ranks=$2
    shift 2
    {
        printf '[job]\nname = %s\nscript = %s\ndsrun = %s\n' "$name" "$script" "$DSRUN"
        [[ -n ${JOB_ARGS:-} ]] && printf 'args = %s\n' "$JOB_ARGS"
        printf '[resources]\nnum_gpus = %s\ndevice = cpu\n' "$ranks"
        for line in "$@"; do printf '%s\n' "$line"; done
    } > "$job/job.ini"
}

# write_train_job NAME_SUFFIX RANKS [extra ini lines...]: the example GPT trainer, tiny,
# through train_hook.lua, with ZeRO-2, dropout, a checkpoint every 3 steps and the final
# weights exported; TRAIN_STEPS (default 12) steps.
write_tiny_config() {
    cat > "$job/tiny.lua" <<EOF
return {model = {vocab = 32, context = 16, d = 32, layers = 2, heads = 2, dropout = 0.1},
        batch = 4, steps = ${TRAIN_STEPS:-12}, warmup = 2, log_every = 1, save_every = 3,
        ckpt = 'ck', export = 'final.safetensors'}
EOF
}

write_train_job() {
    local ranks=$1
    shift
    write_tiny_config
    JOB_ARGS=tiny.lua write_local_job train_hook.lua "$ranks" "[engine]" "zero_stage = 2" \
        "[env]" "TRAIN_LUA = $TRAIN_LUA" "$@"
}

# write_train_job_ssh [extra ini lines...]: the same over SSH, 2 nodes x 2 ranks.
write_train_job_ssh() {
    write_tiny_config
    JOB_ARGS=tiny.lua write_job train_hook.lua "[engine]" "zero_stage = 2" "[env]" "TRAIN_LUA = $TRAIN_LUA" "$@"
}

# The losses rank 0 logged (step loss), from a rank-0.out.
losses() { sed -n 's/^step *\([0-9]*\)\/[0-9]* | loss \([0-9.]*\) .*/\1 \2/p' "$1"; }

# The final weights of the same job run without interruption, for comparison.
reference_weights() {
    local saved_name=$name
    rm -rf "$job/ck"
    run_job
    [[ $rc == 0 ]] || fail "the uninterrupted reference run failed ($rc)"
    mv "$job/final.safetensors" "$job/reference.safetensors"
    rm -rf "$job/ck"
}

# all_paused N STEP [ATTEMPT]: ranks 0..N-1 of the attempt (default 0) wait at STEP.
all_paused() {
    local n=$1 at=$2 a=${3:-0}
    for ((r = 0; r < n; r++)); do has "$run_dir/attempt-$a/rank-$r.out" "paused at step $at" || return 1; done
}

# The pid of rank R's worker (by its marker arguments).
worker_pid() {
    grep -lsazx -- "$name-[0-9a-f]\{8\}" /proc/[0-9]*/cmdline | while read -r f; do
        tr '\0' ' ' < "$f" 2>/dev/null | grep -q " worker --job $name-[0-9a-f]* --rank $1 " && basename "$(dirname "$f")"
    done
}

# ---- cases ----

# Attempt 0 fails (rank 1 exits 3); the restart succeeds. Each attempt has its own logs.
case_restart_then_ok() {
    write_local_job flaky.lua 3 "[restart]" "max_restarts = 2" "backoff = 0.1"
    run_job
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0 after a successful restart"
    has "$job/err" "attempt 0 failed after .*: rank 1 on localhost exited with code 3" || fail "attempt 0's failure not reported"
    has "$job/err" "restarting in 0.1 s (restart 1 of 2)" || fail "the restart was not announced"
    has "$job/err" "all 3 ranks exited 0 .* (after 1 restart)" || fail "the success line does not count the restart"
    for r in 0 1 2; do
        has "$run_dir/attempt-0/rank-$r.out" "rank $r attempt 0" || fail "attempt-0/rank-$r.out lost its line"
        has "$run_dir/attempt-1/rank-$r.out" "rank $r attempt 1" || fail "attempt-1/rank-$r.out lacks DS_ATTEMPT=1"
        has "$run_dir/attempt-1/rank-$r.out" "rank $r done" || fail "rank $r did not finish attempt 1"
    done
    has "$run_dir/attempt-0/rank-1.err" "rank 1 fails in attempt 0" || fail "attempt 0's stderr was not kept"
    [[ ! -e $run_dir/attempt-2 ]] || fail "a third attempt ran"
    assert_no_orphans
}

# A restarted job keeps publishing metrics: each attempt has its own metrics.jsonl and
# report.html in its directory, the progress line counts the restart, and the Prometheus
# endpoint stays on the port the first attempt chose.
case_monitor_restart() {
    write_local_job monitored_flaky.lua 2 "[restart]" "max_restarts = 1" "backoff = 0" \
        "[monitor]" "steps_per_print = 1" "metrics_port = 0"
    run_job
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0 after the restart"
    has "$run_dir/attempt-0/metrics.jsonl" '"step":2,' || fail "attempt 0's metrics.jsonl lacks step 2"
    ! has "$run_dir/attempt-0/metrics.jsonl" '"step":3,' || fail "attempt 0 has a step it never made"
    has "$run_dir/attempt-1/metrics.jsonl" '"step":3,' || fail "attempt 1's metrics.jsonl lacks step 3"
    has "$job/err" '^dslaunch: step 2/3 (66%) .*| restarts 0$' || fail "attempt 0's progress line"
    has "$job/err" '^dslaunch: step 3/3 (100%) .*| restarts 1$' || fail "the progress line does not count the restart"
    has "$run_dir/attempt-0/report.html" 'FAILED: ' || fail "attempt 0's report does not say it failed"
    has "$run_dir/attempt-1/report.html" '"restarts":1' || fail "attempt 1's report does not count the restart"
    has "$run_dir/attempt-1/report.html" 'all 2 ranks started' || fail "attempt 1's report lacks the job's events"
    endpoints=$(grep -ao 'Prometheus metrics at http://[0-9.:]*/metrics' "$run_dir/launcher.log")
    [[ $(wc -l <<< "$endpoints") == 2 && $(sort -u <<< "$endpoints" | wc -l) == 1 ]] ||
        fail "each attempt should serve on the first one's port: $endpoints"
    assert_no_orphans
}

# Every attempt fails: max_restarts restarts, then the job fails with status 1.
case_restarts_exhausted() {
    write_local_job always_fails.lua 2 "[restart]" "max_restarts = 2" "backoff = 0"
    run_job
    [[ $rc == 1 ]] || fail "exit status $rc, expected 1"
    [[ -d $run_dir/attempt-2 && ! -e $run_dir/attempt-3 ]] || fail "expected attempts 0, 1 and 2: $(ls "$run_dir")"
    [[ $(grep -c "rank 0 on localhost failed: .*rank 0 fails in attempt" "$job/err") == 3 ]] ||
        fail "each attempt's root cause should be rank 0's error"
    has "$job/err" "no restart left (2 of 2 made)" || fail "the end does not say the restarts ran out"
    has "$job/err" "FAILED after" || fail "no final failure line"
    assert_no_orphans
}

# Two runs of the same job, the first with 3 ranks, the second with 2: each has its own
# run directory; latest names the second; nothing of the first is replaced, and the
# second's holds no stale rank-2 logs of the first.
case_run_dirs() {
    write_local_job hello.lua 3
    run_job
    [[ $rc == 0 ]] || fail "first run: exit status $rc"
    first=$(readlink "$job/logs/$name/latest")
    [[ -n $first ]] || fail "no latest link after the first run"
    cp "$job/logs/$name/$first/attempt-0/rank-0.out" "$job/first-rank-0.out"
    write_local_job hello.lua 2
    run_job
    [[ $rc == 0 ]] || fail "second run: exit status $rc"
    second=$(readlink "$job/logs/$name/latest")
    [[ $second != "$first" ]] || fail "the second run reused the first run's directory $first"
    cmp -s "$job/first-rank-0.out" "$job/logs/$name/$first/attempt-0/rank-0.out" || fail "the first run's log changed"
    has "$job/logs/$name/$first/launcher.log" "all 3 ranks exited 0" || fail "the first run's launcher.log was replaced"
    [[ ! -e $job/logs/$name/$second/attempt-0/rank-2.out ]] || fail "the 2-rank run's logs hold a rank-2.out"
    id1=$(sed -n 's/.*job \(it-[^ ]*\) attempt 0:.*/\1/p' "$job/logs/$name/$first/launcher.log")
    has "$job/logs/$name/$second/attempt-0/rank-0.out" "job $name-" || fail "second run's rank log missing"
    ! has "$job/logs/$name/$second/attempt-0/rank-0.out" "job $id1" || fail "second run's log holds the first run's job id"
    assert_no_orphans
}

# A script that cannot be loaded is the user's error: no restart, exit status 2.
case_user_error() {
    write_local_job syntax_error.lua 2 "[restart]" "max_restarts = 3" "backoff = 0"
    run_job
    [[ $rc == 2 ]] || fail "exit status $rc, expected 2 (user error)"
    has "$job/err" "could not load its script" || fail "the summary does not say the script could not be loaded"
    [[ ! -e $run_dir/attempt-1 ]] || fail "a user error was restarted"
    assert_no_orphans
}

# 50 attempts of a 4-rank job (one invocation, 49 restarts): in each, a random rank fails
# in a random way (Lua error, exit, SIGKILL, SIGSEGV, SIGABRT, an error raised in C) while
# its peers are inside an all-reduce; the root cause named must be that rank every time.
case_root_cause() {
    local n=${ROOT_CAUSE_RUNS:-50}
    write_local_job rootcause.lua 4 "[restart]" "max_restarts = $((n - 1))" "backoff = 0" \
        "[env]" "RC_SEED = ${ROOT_CAUSE_SEED:-$$}" "DS_COMM_TIMEOUT_MS = 20000"
    timeout -s KILL 300 "$DSLAUNCH" "$job/job.ini" > "$job/out" 2> "$job/err"
    rc=$?
    [[ $rc == 1 ]] || fail "exit status $rc, expected 1 (every attempt fails)"
    for ((a = 0; a < n; a++)); do
        plan=$(grep -a "plan attempt $a " "$run_dir/attempt-$a/rank-0.out") || fail "attempt $a: no plan line"
        victim=$(sed 's/.* victim \([0-9]*\) .*/\1/' <<< "$plan")
        named=$(sed -n "s/.*attempt $a failed: rank \([0-9]*\) .*/\1/p" "$run_dir/launcher.log")
        [[ $named == "$victim" ]] || fail "attempt $a ($plan): root cause named rank '${named}', expected $victim"
    done
    assert_no_orphans
}

# A rank killed after step 5 (the last checkpoint: step 3): the restart resumes from
# step 3 by itself and the final weights are bit for bit those of an uninterrupted run.
case_resume_exact() {
    write_train_job 2 "[restart]" "max_restarts = 1" "backoff = 0"
    reference_weights
    printf '[env]\nPAUSE_AT_STEP = 5\n' >> "$job/job.ini"
    start_job_bg
    wait_for 30 "both ranks to pause at step 5" all_paused 2 5
    pid=$(worker_pid 1)
    [[ -n $pid ]] || fail "cannot find rank 1's worker"
    kill -KILL "$pid"
    wait_job_bg
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0 after the restart"
    has "$run_dir/attempt-1/rank-0.out" "resumed from ck at step 3" || fail "attempt 1 did not resume at step 3"
    has "$job/err" "rank 1 on localhost was killed by signal 9" || fail "the root cause is not the killed rank"
    cmp -s "$job/final.safetensors" "$job/reference.safetensors" || fail "the resumed run's weights differ from the uninterrupted run's"
    assert_no_orphans
}

# SIGUSR1 while every rank waits after step 5: the ranks agree to stop after step 5,
# save it and exit; dslaunch exits 3 (requeue). The same command then resumes at step 5
# and ends with the weights of an uninterrupted run, byte for byte.
case_drain_exact() {
    write_train_job 2
    reference_weights
    printf '[env]\nPAUSE_AT_STEP = 5\nPAUSE_UNTIL = %s/go\n' "$job" >> "$job/job.ini"
    start_job_bg
    wait_for 30 "both ranks to pause at step 5" all_paused 2 5
    kill -USR1 "$dl_pid"
    draining() { has "$run_dir/launcher.log" "draining on SIGUSR1"; }
    wait_for 10 "dslaunch to begin draining" draining
    touch "$job/go"
    wait_job_bg
    [[ $rc == 3 ]] || fail "exit status $rc after SIGUSR1, expected 3 (drained)"
    has "$job/err" "drained at step 5 on SIGUSR1" || fail "the summary does not say where it drained"
    for r in 0 1; do has "$run_dir/attempt-0/rank-$r.out" "drained at step 5" || fail "rank $r did not drain at step 5"; done
    [[ $(cat "$job/ck/latest") == step-5 ]] || fail "the checkpoint is $(cat "$job/ck/latest"), expected step-5"
    assert_no_orphans
    run_job
    [[ $rc == 0 ]] || fail "the resumed run: exit status $rc"
    has "$run_dir/attempt-0/rank-0.out" "resumed from ck at step 5" || fail "the second run did not resume at step 5"
    cmp -s "$job/final.safetensors" "$job/reference.safetensors" || fail "drained and resumed weights differ from the uninterrupted run's"
    assert_no_orphans
}

# A script that never polls for drains is stopped by SIGTERM as an interrupt (143).
case_drain_unaware() {
    cp "$here/../launch/scripts/spin.lua" "$job/"
    write_local_job spin.lua 2
    start_job_bg
    all_ready() { for r in 0 1; do has "$run_dir/attempt-0/rank-$r.out" "ready $r" || return 1; done; }
    wait_for 20 "every rank to be running" all_ready
    kill -TERM "$dl_pid"
    wait_job_bg
    [[ $rc == 143 ]] || fail "exit status $rc, expected 143"
    has "$job/err" "the script does not drain" || fail "no word that the script does not drain"
    assert_no_orphans
}

# Rank 1 sleeps inside step 5 while rank 0 waits for it in a collective: the controller
# names rank 1 (not in a collective) within hang_timeout, restarts, and the job resumes
# and finishes.
case_hang() {
    write_train_job 2 "[restart]" "max_restarts = 1" "backoff = 0" "hang_timeout = 2"
    printf '[env]\nPAUSE_AT_STEP = 5\nPAUSE_RANK = 1\n' >> "$job/job.ini"
    start_job_bg
    paused() { has "$run_dir/attempt-0/rank-1.out" "paused at step 5"; }
    wait_for 30 "rank 1 to pause at step 5" paused
    start=$SECONDS
    restarted() { has "$run_dir/launcher.log" "attempt 0 failed"; }
    wait_for 15 "the hang to be noticed" restarted
    ((SECONDS - start <= 6)) || fail "took $((SECONDS - start)) s to notice a 2 s hang"
    wait_job_bg
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0 after the restart"
    has "$job/err" "attempt 0 failed after .*: hang: no step progress for 2.0 s: rank 1 (localhost) at step 5 is not in a collective" ||
        fail "the hang does not name rank 1 at step 5"
    has "$job/err" "rank 0 at step 5 waiting in allreduce of 1 int32" || fail "the hang does not say where rank 0 waits"
    has "$run_dir/launcher.log" "attempt 1 resumed at step 3" || fail "launcher.log does not say where attempt 1 resumed"
    assert_no_orphans
}

# A worker stopped with SIGSTOP (alive, silent): hang detection names it, it is killed
# (it cannot act on TERM), the job restarts and finishes.
case_stopped_worker() {
    # Stopped while it trains (a pause before the stop would itself count as a hang and
    # race with it): its reports stop with it, while rank 0 waits in a collective for it.
    TRAIN_STEPS=40 write_train_job 2 "[restart]" "max_restarts = 1" "backoff = 0" "hang_timeout = 4"
    start_job_bg
    stepping() { has "$run_dir/attempt-0/rank-1.out" "^step  *2/40 "; }
    wait_for 30 "rank 1 to finish step 2" stepping
    pid=$(worker_pid 1)
    [[ -n $pid ]] || fail "cannot find rank 1's worker"
    kill -STOP "$pid"
    wait_job_bg
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0 after the restart"
    has "$job/err" "hang: .*rank 1 (localhost) .*stopped reporting" || fail "the hang does not name the stopped rank 1"
    has "$job/err" "<- root cause" || fail "no root cause marked"
    assert_no_orphans
}

# Hostfile names that are ssh config aliases ([ssh] config) stay aliases across a
# restart: node 1's agent is killed and excluded, the spare (an alias too) takes its
# place at its HostName, and node 0 is still reached on its alias's Port (the config's
# only Port lines are the aliases').
case_spare_alias() {
    cat > "$job/ssh_config" <<CFG
Host first
    HostName 127.0.0.2
    Port $SSHD_PORT
Host second
    HostName 127.0.0.3
    Port $SSHD_PORT
Host third
    HostName 127.0.0.4
    Port $SSHD_PORT
Host *
    User root
    IdentityFile $SSH_IDENTITY
    IdentitiesOnly yes
    UserKnownHostsFile $SSH_KNOWN_HOSTS
    ConnectTimeout 5
CFG
    printf 'first slots=2\nsecond slots=2\nthird slots=2 spare\n' > "$job/hosts"
    {
        printf '[job]\nname = %s\nscript = hold_first_attempt.lua\ndsrun = %s\n' "$name" "$DSRUN"
        printf '[resources]\nhostfile = hosts\n[ssh]\nconfig = %s/ssh_config\n' "$job"
        printf '[restart]\nmax_restarts = 1\nbackoff = 0\nnode_retries = 1\n'
    } > "$job/job.ini"
    start_job_bg
    all_ready() { for r in 0 1 2 3; do has "$run_dir/attempt-0/rank-$r.out" "ready $r" || return 1; done; }
    wait_for 20 "every rank to be ready" all_ready
    agent=$(agent_pid 1)
    [[ -n $agent ]] || fail "cannot find node 1's agent"
    kill -KILL "$agent"
    wait_job_bg
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0 once the spare took node 1's place"
    has "$job/err" "node 127.0.0.3 excluded" || fail "node 1 was not excluded"
    has "$job/err" "node 127.0.0.3 replaced by spare third" || fail "the spare did not replace node 1"
    for r in 0 1 2 3; do has "$run_dir/attempt-1/rank-$r.out" "done $r" || fail "rank $r did not finish attempt 1"; done
    has "$run_dir/attempt-1/rank-0.out" "rank 0 attempt 1 on 127.0.0.2" || fail "node 0 is not 127.0.0.2 in attempt 1"
    has "$run_dir/attempt-1/rank-2.out" "rank 2 attempt 1 on 127.0.0.4" || fail "the spare is not known by its HostName"
    assert_no_orphans
}

# min_nodes = 1, no spare: node 1's agent is killed after step 5; with node_retries = 1
# it is excluded and the job goes on with node 0's 2 ranks (grad_accum 1 -> 2, the same
# global batch), resumed from step 3's checkpoint resharded from 4 ranks to 2; its losses
# stay close to the uninterrupted 4-rank run's.
case_shrink() {
    write_train_job_ssh "[restart]" "max_restarts = 1" "backoff = 0" "node_retries = 1" "min_nodes = 1"
    reference_weights
    cp "$run_dir/attempt-0/rank-0.out" "$job/reference.out"
    printf '[env]\nPAUSE_AT_STEP = 5\nPAUSE_UNTIL = %s/go\n' "$job" >> "$job/job.ini"
    start_job_bg
    wait_for 30 "every rank to pause at step 5" all_paused 4 5
    agent=$(agent_pid 1)
    [[ -n $agent ]] || fail "cannot find node 1's agent"
    kill -KILL "$agent"
    touch "$job/go"
    wait_job_bg
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0 after shrinking"
    has "$job/err" "node 127.0.0.3 excluded: failed 1 time (\[restart\] node_retries = 1)" || fail "the exclusion is not reported"
    has "$job/err" "node 127.0.0.3 dropped (no spare left)" || fail "the shrink is not reported"
    has "$job/err" "grad_accum 1 -> 2 for 2 ranks" || fail "grad_accum was not raised"
    has "$job/err" "node 127.0.0.3 was excluded from this run" || fail "the final summary does not name the excluded node"
    has "$run_dir/attempt-1/rank-0.out" "resumed from ck at step 3" || fail "attempt 1 did not resume at step 3"
    has "$run_dir/attempt-1/rank-0.out" "accumulation 2" || fail "attempt 1 does not accumulate 2 micro-batches"
    [[ ! -e $run_dir/attempt-1/rank-2.out ]] || fail "attempt 1 still has 4 ranks"
    losses "$job/reference.out" > "$job/ref.losses"
    losses "$run_dir/attempt-1/rank-0.out" > "$job/shrunk.losses"
    [[ $(wc -l < "$job/shrunk.losses") == 9 ]] || fail "attempt 1 logged $(wc -l < "$job/shrunk.losses") steps, expected 4..12"
    # Same global batch, other rows per micro-batch: close, not equal.
    apart=$(awk 'NR == FNR { ref[$1] = $2; next }
                 { d = ref[$1] - $2; if (d < 0) d = -d; if (d > 0.15) printf " step %s: %s vs %s;", $1, ref[$1], $2 }' \
            "$job/ref.losses" "$job/shrunk.losses")
    [[ -z $apart ]] || fail "the shrunk run's losses left the reference's:$apart"
    assert_no_orphans
}

# start_http: the test's HTTP server on 127.0.0.1, serving $job/www; sets http_port.
start_http() {
    mkdir -p "$job/www"
    coproc HTTP { "$HTTP_SERVER" "$job/www"; }
    bg_pids+=("$HTTP_PID")
    read -r http_port <&"${HTTP[0]}" || fail "the test's HTTP server did not start"
}

# Every typed event of a run that fails once and then succeeds reaches the webhook, as
# the same JSON objects launcher.log holds.
case_webhook() {
    start_http
    write_local_job flaky.lua 2 "[restart]" "max_restarts = 1" "backoff = 0" \
        "[notify]" "webhook = http://127.0.0.1:$http_port/hook"
    run_job
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0"
    ! has "$job/err" "warning: the webhook" || fail "a warning about a working webhook"
    posts=$job/www/posts.jsonl
    for kind in started rank_failed attempt_failed restarting finished; do
        grep -q "\"event\":\"$kind\"" "$posts" || fail "the webhook did not receive a '$kind' event"
    done
    grep -q '"event":"rank_failed".*"rank":1.*"exit_code":3' "$posts" || fail "rank_failed does not say rank 1 exited 3"
    grep -q '"event":"attempt_failed".*"root_cause":{"rank":1' "$posts" || fail "attempt_failed does not name rank 1"
    [[ $(grep -c '"event":"started"' "$posts") == 2 ]] || fail "expected two started events (two attempts)"
    typed=$(grep -vc '"event":"info"' "$run_dir/launcher.log")
    [[ $(wc -l < "$posts") == "$typed" ]] || fail "the webhook got $(wc -l < "$posts") events, launcher.log has $typed"
    assert_no_orphans
}

# A webhook nobody answers: one warning, the job itself unaffected.
case_webhook_dead() {
    write_local_job hello.lua 2 "[notify]" "webhook = http://127.0.0.1:9/hook" "timeout = 0.5"
    run_job
    [[ $rc == 0 ]] || fail "exit status $rc with a dead webhook, expected 0"
    [[ $(grep -c "warning: the webhook http://127.0.0.1:9/hook does not take events" "$job/err") == 1 ]] ||
        fail "expected exactly one warning about the dead webhook"
    has "$run_dir/launcher.log" '"event":"finished"' || fail "launcher.log lacks the finished event"
    assert_no_orphans
}

# The script and a data file given by URL with their SHA-256, on 2 nodes over SSH (no
# local node, so the ranks can only have them from their agents): fetched once, shipped,
# run; a second run finds them in the cache with the server gone.
case_url_script() {
    start_http
    cat > "$job/www/remote.lua" <<'EOF'
local ds = require 'ds'
local path = assert(arg[1]:match('^data=(.*)$'), 'expected data=PATH')
local f = assert(io.open(path))
local line = f:read('l')
f:close()
print(string.format('rank %d read "%s" from %s', ds.rank(), line, path))
EOF
    echo "the data by URL" > "$job/www/data.txt"
    sum() { sha256sum "$job/www/$1" | cut -d' ' -f1; }
    script_url="http://127.0.0.1:$http_port/remote.lua#sha256=$(sum remote.lua)"
    JOB_ARGS="data=http://127.0.0.1:$http_port/data.txt#sha256=$(sum data.txt)" write_job "$script_url"
    export XDG_CACHE_HOME=$job/cache # the controller's cache
    run_job
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0"
    for r in 0 1 2 3; do
        has "$run_dir/attempt-0/rank-$r.out" "rank $r read \"the data by URL\" from .dslaunch-files/$(sum data.txt)/data.txt" ||
            fail "rank $r did not run the fetched script on the fetched data"
    done
    [[ -f $job/cache/dslaunch/sha256/$(sum remote.lua) ]] || fail "the script is not in the cache"
    has "$run_dir/launcher.log" "fetched http://127.0.0.1:$http_port/data.txt" || fail "launcher.log does not say what was fetched"
    kill -KILL "$HTTP_PID" && wait "$HTTP_PID" 2>/dev/null
    rm -rf "$job/.dslaunch-files"
    run_job
    [[ $rc == 0 ]] || fail "second run (server gone, files cached): exit status $rc"
    has "$run_dir/attempt-0/rank-3.out" "rank 3 read \"the data by URL\"" || fail "the second run did not ship the cached files"
    assert_no_orphans
}

# A URL whose content does not match its SHA-256 is refused before any rank starts.
case_url_wrong_sha() {
    start_http
    echo 'print("must never run")' > "$job/www/evil.lua"
    export XDG_CACHE_HOME=$job/cache
    write_local_job "http://127.0.0.1:$http_port/evil.lua#sha256=$(printf '0%.0s' $(seq 64))" 2
    run_job
    [[ $rc == 2 ]] || fail "exit status $rc, expected 2"
    has "$job/err" "SHA-256 mismatch" || fail "no clear mismatch error"
    has "$job/err" "http://127.0.0.1:$http_port/evil.lua" || fail "the error does not name the URL"
    [[ ! -e $run_dir/attempt-0 ]] || fail "an attempt started"
    ! has "$job/out" "must never run" || fail "the script ran"
    [[ -z $(ls "$job/cache/dslaunch/sha256" 2>/dev/null) ]] || fail "the bad download was kept in the cache"
    assert_no_orphans
}

# A full disk under the logs: a 512 KB tmpfs (or, where mounting is not allowed, a 512 KB
# file size limit) takes part of 2 x 950 KB of rank output; then a full one (or a limit
# of 0) takes nothing, launcher.log included. Each time: a warning on the terminal, the
# lost bytes per rank in the summary, and exit status 4 although every rank exited 0.
# Runs the job with the file size limit $limit (if set); its terminal output goes through
# a pipe, which no file size limit touches, to $job/err.
run_limited() {
    (
        [[ -n $limit ]] && ulimit -f "$limit"
        timeout -s KILL 45 "$DSLAUNCH" "$job/job.ini" 2>&1
    ) | cat > "$job/err"
    rc=${PIPESTATUS[0]}
}

case_logs_lost() {
    local logs=$job/small
    mkdir -p "$logs"
    local limit=""
    if [[ -z ${LOGS_LOST_NO_MOUNT:-} ]] && mount -t tmpfs -o size=512k tmpfs "$logs" 2>/dev/null; then
        on_cleanup="umount '$logs' 2>/dev/null"
    else
        limit=512
    fi
    write_local_job big_output.lua 2 "[logs]" "dir = $logs" "tee = none"
    run_limited
    [[ $rc == 4 ]] || fail "exit status $rc with a full disk, expected 4"
    has "$job/err" "warning: rank [01]'s stdout log: \(No space left on device\|File too large\)" || fail "no warning on the terminal"
    has "$job/err" "LOGS LOST in attempt 0: .*rank 0: .* of stdout" || fail "the summary does not count rank 0's lost bytes"
    has "$job/err" "all 2 ranks exited 0 .*, BUT [0-9]* bytes of logs were lost (exit status 4)" || fail "the end line hides the loss"
    kept=$(cat "$logs/$name"/latest/attempt-0/rank-*.out | wc -c)
    ((kept < 2 * 950000)) || fail "the logs kept $kept bytes: nothing was lost?"
    # full: nothing fits, launcher.log included
    if [[ -z $limit ]]; then
        dd if=/dev/zero of="$logs/filler" bs=4k 2>/dev/null
    else
        limit=0
    fi
    run_limited
    [[ $rc == 4 ]] || fail "exit status $rc with a full disk, expected 4 ($(tail -3 "$job/err"))"
    has "$job/err" "warning: launcher.log: \(No space left on device\|File too large\)" || fail "no warning about launcher.log"
    has "$job/err" "LOGS LOST in attempt 0" || fail "the summary does not count the lost bytes"
    assert_no_orphans
}

# Ranks leave setsid daemons (out of their group and session) and node 1's agent is
# killed with SIGKILL: no process of the job may survive anywhere (cgroup.kill where the
# node has cgroup v2, else each worker's own sweep as a subreaper).
escape_after() {
    write_job escape.lua "$@"
    start_job_bg
    all_ready() { for r in 0 1 2 3; do has "$run_dir/attempt-0/rank-$r.out" "ready $r" || return 1; done; }
    wait_for 20 "every rank to be running" all_ready
    daemons() { [[ $(job_pids | xargs -r ps -o comm= -p 2>/dev/null | grep -c sleep) -ge 12 ]]; }
    wait_for 10 "every rank's daemons" daemons
}

case_escape_agent_killed() {
    escape_after
    agent=$(agent_pid 1)
    [[ -n $agent ]] || fail "cannot find node 1's agent"
    kill -KILL "$agent"
    wait_job_bg
    [[ $rc != 0 ]] || fail "exit status 0 after an agent died"
    has "$run_dir/launcher.log" "descendants tracked by cgroup" || has "$run_dir/launcher.log" "descendants tracked by subreaper" ||
        fail "launcher.log does not say how descendants are tracked"
    assert_no_orphans
}

# The same where cgroups are not used (DS_CGROUP=off for the agents): the workers, as
# subreapers, sweep their own descendants when their agent dies.
case_escape_subreaper() {
    printf '#!/bin/sh\nDS_CGROUP=off exec %s "$@"\n' "$DSRUN" > "$job/dsrun-nocg"
    chmod +x "$job/dsrun-nocg"
    DSRUN=$job/dsrun-nocg escape_after
    has "$run_dir/launcher.log" "descendants tracked by subreaper (DS_CGROUP=off)" || fail "the agents did not use subreapers"
    agent=$(agent_pid 1)
    [[ -n $agent ]] || fail "cannot find node 1's agent"
    kill -KILL "$agent"
    wait_job_bg
    assert_no_orphans
}

# An agent that no longer answers (SIGSTOP) is killed with its ranks over a second SSH
# channel: their daemons must go too, with cgroups and without.
second_channel() {
    escape_after "[restart]" "heartbeat_interval = 0.2" "heartbeat_timeout = 1"
    agent=$(agent_pid 1)
    [[ -n $agent ]] || fail "cannot find node 1's agent"
    bg_pids+=("$agent")
    kill -STOP "$agent"
    wait_job_bg
    has "$run_dir/launcher.log" "killing its agent and ranks over a second channel" || fail "no second-channel kill"
    assert_no_orphans
}

case_escape_second_channel() {
    second_channel
    printf '#!/bin/sh\nDS_CGROUP=off exec %s "$@"\n' "$DSRUN" > "$job/dsrun-nocg"
    chmod +x "$job/dsrun-nocg"
    DSRUN=$job/dsrun-nocg second_channel
}

# Logs and checkpoints are private by default (directories 0700, files 0600, whatever
# the umask); [logs] mode and [checkpoint] mode share them.
mode_of() { stat -c %a "$1"; }
case_permissions() {
    umask 022
    write_train_job 2
    run_job
    [[ $rc == 0 ]] || fail "exit status $rc"
    run=$(readlink -f "$run_dir")
    for d in "$job/logs" "$job/logs/$name" "$run" "$run/attempt-0" "$job/ck" "$job/ck/step-12"; do
        [[ $(mode_of "$d") == 700 ]] || fail "$d has mode $(mode_of "$d"), expected 700"
    done
    for f in "$run/launcher.log" "$run/attempt-0/rank-0.out" "$run/attempt-0/rank-1.err" "$job/ck/latest" \
             "$job/ck/step-12/meta.json" "$job/ck/step-12/rank-1-of-2.bin"; do
        [[ $(mode_of "$f") == 600 ]] || fail "$f has mode $(mode_of "$f"), expected 600"
    done
    rm -rf "$job/logs" "$job/ck"
    umask 077
    printf '[logs]\nmode = 0750\n[checkpoint]\nmode = 0750\n' >> "$job/job.ini"
    run_job
    [[ $rc == 0 ]] || fail "exit status $rc with modes"
    run=$(readlink -f "$run_dir")
    for d in "$run" "$run/attempt-0" "$job/ck" "$job/ck/step-12"; do
        [[ $(mode_of "$d") == 750 ]] || fail "$d has mode $(mode_of "$d"), expected 750"
    done
    for f in "$run/attempt-0/rank-0.out" "$job/ck/step-12/rank-0-of-2.bin" "$job/ck/step-12/meta.json"; do
        [[ $(mode_of "$f") == 640 ]] || fail "$f has mode $(mode_of "$f"), expected 640"
    done
    assert_no_orphans
}

# A known_hosts entry without [host]:port is for port 22 only, as OpenSSH reads it: our
# sshd's port is not 22, so plain entries must not vouch for it.
case_known_hosts_port() {
    write_job hello.lua
    sed "s/^\[\(127\.0\.0\.[0-9]*\)\]:[0-9]* /\1 /" "$SSH_KNOWN_HOSTS" > "$job/known_hosts"
    grep -q "^127.0.0.2 ssh-ed25519 " "$job/known_hosts" || fail "could not write plain entries"
    sed -i "s#^known_hosts = .*#known_hosts = $job/known_hosts#" "$job/job.ini"
    run_job
    [[ $rc != 0 ]] || fail "a port-22 entry was accepted for port $SSHD_PORT"
    has "$job/err" "host key of \[127.0.0.[23]\]:$SSHD_PORT is unknown" || fail "the host key was not reported unknown"
    assert_no_orphans
}

# Chaos: 2 nodes x 2 ranks and a spare, each node in a network namespace of its own with
# its own sshd, a tiny GPT with ZeRO-2 saving every 3 steps. Attempt 0: a worker is killed
# after step 4; attempt 1: node 0's agent after step 8; attempt 2: the whole of node 1
# (sshd and all) after step 12; attempt 3 cannot reach node 1, which is excluded for the
# spare; attempt 4 resumes at step 9 and finishes. Every root cause is what was killed,
# every attempt keeps its logs, nothing of the job is left, and the final weights are an
# uninterrupted run's, bit for bit.
case_chaos() {
    local tag="dsc$$" nets=$job/netns
    on_cleanup="'$here/netns.sh' down $tag '$nets'"
    "$here/netns.sh" up "$tag" 3 "$SSHD_DIR" "$nets" || fail "cannot set up the network namespaces"
    . "$nets/net"
    mapfile -t ip < "$nets/hosts"
    printf '%s slots=2\n%s slots=2\n%s slots=2 spare\n' "${ip[0]}" "${ip[1]}" "${ip[2]}" > "$job/hosts"
    TRAIN_STEPS=15 write_tiny_config
    {
        printf '[job]\nname = %s\nscript = train_hook.lua\nargs = tiny.lua\ndsrun = %s\n' "$name" "$DSRUN"
        printf '[resources]\nhostfile = hosts\n[rendezvous]\naddr = %s\n' "$BRIDGE_ADDR"
        printf '[ssh]\nport = %s\nidentity = %s\nknown_hosts = %s\nconnect_timeout = 3\n' \
            "$SSHD_PORT" "$SSH_IDENTITY" "$nets/known_hosts"
        printf '[engine]\nzero_stage = 2\n[env]\nTRAIN_LUA = %s\n' "$TRAIN_LUA"
        printf '[restart]\nmax_restarts = 4\nbackoff = 0\nnode_retries = 2\n'
    } > "$job/job.ini"
    reference_weights
    printf '[env]\nPAUSE_AT = 0:4,1:8,2:12\nPAUSE_UNTIL = %s/go-%%a\n' "$job" >> "$job/job.ini"
    start_job_bg
    wait_for 30 "attempt 0 to pause at step 4" all_paused 4 4 0
    pid=$(worker_pid 1)
    [[ -n $pid ]] || fail "cannot find rank 1's worker"
    kill -KILL "$pid"
    touch "$job/go-0"
    wait_for 30 "attempt 1 to pause at step 8" all_paused 4 8 1
    agent=$(agent_pid 0)
    [[ -n $agent ]] || fail "cannot find node 0's agent"
    kill -KILL "$agent"
    touch "$job/go-1"
    wait_for 30 "attempt 2 to pause at step 12" all_paused 4 12 2
    for p in $(ip netns pids "$tag-2"); do kill -KILL "$p"; done
    touch "$job/go-2"
    wait_job_bg
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0 after 4 restarts"
    root() { sed -n "s/.*\"event\":\"attempt_failed\",\"attempt\":$1,\"root_cause\":{\"rank\":\(-\?[0-9]*\),\"node\":\(-\?[0-9]*\).*/\1 \2/p" "$run_dir/launcher.log"; }
    [[ $(root 0) == "1 0" ]] || fail "attempt 0's root cause is '$(root 0)', expected rank 1 (node 0)"
    [[ $(root 1) == "-1 0" ]] || fail "attempt 1's root cause is '$(root 1)', expected node 0"
    [[ $(root 2) == "-1 1" ]] || fail "attempt 2's root cause is '$(root 2)', expected node 1"
    [[ $(root 3) == "-1 1" ]] || fail "attempt 3's root cause is '$(root 3)', expected node 1 (unreachable)"
    has "$job/err" "node ${ip[1]} excluded: could not be started" || fail "node 1 was not excluded"
    has "$job/err" "node ${ip[1]} replaced by spare ${ip[2]}" || fail "the spare did not replace node 1"
    for a in 0 1 2 3 4; do [[ -d $run_dir/attempt-$a ]] || fail "attempt-$a's logs are missing"; done
    for a in 0 1 2; do has "$run_dir/attempt-$a/rank-3.out" "paused at step" || fail "attempt-$a lost rank 3's log"; done
    has "$run_dir/attempt-4/rank-2.out" "resumed from ck at step 9" || fail "attempt 4 did not resume at step 9"
    cmp -s "$job/final.safetensors" "$job/reference.safetensors" || fail "the final weights differ from the uninterrupted run's"
    assert_no_orphans
}

"case_$case_name"
[[ -n ${KEEP_WORK:-} ]] || rm -rf "$job"
echo "PASS [$case_name]"
