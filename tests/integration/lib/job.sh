# Helpers for the integration cases that run a dslaunch job (sourced, not run). The case
# sets $name (its job's name, unique to the run) and defines fail MESSAGE.

# Processes whose command line or environment names this job (agents and workers carry
# "--job NAME-..." and DS_JOB_ID=NAME-...; a worker's children inherit the latter).
job_pids() {
    {
        grep -lsazx -- "$name-[0-9a-f]\{8\}" /proc/[0-9]*/cmdline
        grep -lsaz -- "^DS_JOB_ID=$name-" /proc/[0-9]*/environ
    } | sed -n 's#^/proc/\([0-9]*\)/.*#\1#p' | sort -u | grep -vx "$$"
}

# Bounded wait for a condition (a command); fails the case with msg on timeout.
wait_for() {
    local secs=$1 msg=$2
    shift 2
    local end=$((SECONDS + secs))
    until "$@"; do
        ((SECONDS >= end)) && fail "timed out after ${secs}s waiting for: $msg"
        sleep 0.05
    done
}
