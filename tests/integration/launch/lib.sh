# What every launcher test case shares (sourced by launch/cases.sh and restart/cases.sh
# after they set case_name and here): the case's own job directory and name, cleanup of
# every process of the job, bounded waits, and writing and running a job.
. "$(dirname "${BASH_SOURCE[0]}")/../lib/job.sh" # job_pids, wait_for
. "$SSHD_DIR/env"
name="it-${case_name//_/-}-$$"
job="$WORK/$name"
rm -rf "$job"
mkdir -p "$job"
cp "$here"/scripts/*.lua "$job/"
bg_pids=()
bg_cleanup=() # commands that undo what a case started (e.g. a mock server's stop)

cleanup() {
    [[ -n ${on_cleanup:-} ]] && eval "$on_cleanup" # a case's own (e.g. umount)
    for p in "${bg_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    for c in "${bg_cleanup[@]}"; do $c > /dev/null 2>&1; done
    # Belt and braces: anything of this job still around after a failed case goes too.
    for p in $(job_pids); do kill -KILL "$p" 2>/dev/null; done
}
trap cleanup EXIT

fail() {
    echo "FAIL [$case_name]: $*" >&2
    for f in "$job"/out "$job"/err "$job"/logs/"$name"/latest/launcher.log; do
        [[ -f $f ]] && { echo "--- $f" >&2; tail -n 40 "$f" >&2; }
    done
    exit 1
}

# The pid of node N's agent (by its marker arguments).
agent_pid() {
    grep -lsazx -- "$name-[0-9a-f]\{8\}" /proc/[0-9]*/cmdline | while read -r f; do
        tr '\0' ' ' < "$f" 2>/dev/null | grep -q " agent --job $name-[0-9a-f]* --node $1 *$" && basename "$(dirname "$f")"
    done
}

no_job_processes() { [[ -z $(job_pids) ]]; }
assert_no_orphans() {
    # dslaunch only returns once every agent is gone; zombies may take a moment to reap.
    wait_for 3 "every process of $name to be gone ($(job_pids | tr '\n' ' '))" no_job_processes
}

# write_job SCRIPT [extra ini lines...]: job.ini for a 2-node x 2-slot job over SSH
# ($JOB_ARGS, when set, are the script's arguments).
write_job() {
    local script=$1
    shift
    printf '127.0.0.2 slots=2\n127.0.0.3 slots=2\n' > "$job/hosts"
    {
        printf '[job]\nname = %s\nscript = %s\ndsrun = %s\n' "$name" "$script" "$DSRUN"
        [[ -n ${JOB_ARGS:-} ]] && printf 'args = %s\n' "$JOB_ARGS"
        printf '[resources]\nhostfile = hosts\n'
        printf '[ssh]\nport = %s\nidentity = %s\nknown_hosts = %s\nconnect_timeout = 5\n' \
            "$SSHD_PORT" "$SSH_IDENTITY" "$SSH_KNOWN_HOSTS"
        for line in "$@"; do printf '%s\n' "$line"; done
    } > "$job/job.ini"
}

# Runs dslaunch in the foreground (bounded); sets rc.
run_job() {
    timeout -s KILL 45 "$DSLAUNCH" "$@" "$job/job.ini" > "$job/out" 2> "$job/err"
    rc=$?
}

start_job_bg() {
    "$DSLAUNCH" "$job/job.ini" > "$job/out" 2> "$job/err" &
    dl_pid=$!
    bg_pids+=("$dl_pid")
}

wait_job_bg() {
    local end=$((SECONDS + 30))
    while kill -0 "$dl_pid" 2>/dev/null; do
        ((SECONDS >= end)) && fail "dslaunch did not end within 30 s"
        sleep 0.05
    done
    wait "$dl_pid"
    rc=$?
}

logs="$job/logs/$name/latest/attempt-0"
has() { grep -aq -- "$2" "$1" 2>/dev/null; }

