#!/usr/bin/env bash
# The launcher's integration cases: cases.sh CASE (see CMakeLists.txt for the list).
# Needs DSLAUNCH, DSRUN, SILENT_PORT, SSHD_DIR (started by sshd.sh) and WORK in the
# environment. Every case runs a job with a name unique to this run, then checks the
# process table: no process of that job may be left, whatever happened.
set -uo pipefail

case_name=${1:?usage: cases.sh CASE}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

# ---- cases ----

# A job on this node alone: fork/exec, no SSH.
case_local() {
    {
        printf '[job]\nname = %s\nscript = hello.lua\ndsrun = %s\n' "$name" "$DSRUN"
        printf '[resources]\nnum_gpus = 3\ndevice = cpu\n'
    } > "$job/job.ini"
    run_job
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0"
    for r in 0 1 2; do
        has "$logs/rank-$r.out" "rank $r of 3 past the barrier" || fail "rank $r's log lacks its barrier line"
        grep -aq "^\[localhost:$r\] rank $r of 3 past the barrier" "$job/out" || fail "terminal lacks [localhost:$r]"
    done
    has "$job/logs/$name/latest/launcher.log" "agent started locally" || fail "launcher.log does not say the node started locally"
    assert_no_orphans
}

# 2 nodes x 2 slots over SSH: barrier, every rank prints, logs in the right files,
# long lines, binary bytes and a last line without newline intact.
case_two_nodes() {
    write_job hello.lua
    run_job
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0"
    for r in 0 1 2 3; do
        host=127.0.0.$((2 + r / 2))
        grep -aq "^\[$host:$r\] rank $r of 4 past the barrier$" "$job/out" || fail "terminal lacks rank $r's line tagged [$host:$r]"
        grep -aq "^\[$host:$r\] rank $r says goodbye without newline$" "$job/out" || fail "rank $r's last unterminated line is missing on the terminal"
        grep -aq "^\[$host:$r\] to stderr from rank $r$" "$job/err" || fail "rank $r's stderr line is missing on the terminal"
        # The files get the bytes exactly as the script wrote them.
        expected=$("$DSRUN" run "$job/hello.lua" --expect "$r" 4 | od -c)
        [[ $(od -c < "$logs/rank-$r.out") == "$expected" ]] || fail "rank-$r.out differs from what rank $r wrote"
        has "$logs/rank-$r.err" "to stderr from rank $r" || fail "rank-$r.err lacks its line"
        ! has "$logs/rank-$r.out" "to stderr" || fail "stderr leaked into rank-$r.out"
    done
    # One terminal line per printed line: no line split or merged.
    [[ $(grep -ac "past the barrier" "$job/out") == 4 ]] || fail "barrier lines split or merged on the terminal"
    # The 100000-byte line: on the terminal in pieces of at most 64 KiB, every byte there.
    [[ $(grep -a "^\[127.0.0.3:3\] " "$job/out" | tr -cd x | wc -c) == 100000 ]] || fail "the long line lost bytes on the terminal"
    has "$job/logs/$name/latest/launcher.log" "node 1 (127.0.0.3): connecting over SSH" || fail "launcher.log lacks the SSH connection"
    has "$job/logs/$name/latest/launcher.log" "all 4 ranks exited 0" || fail "launcher.log lacks the end"
    assert_no_orphans
}

# Rank 3 exits 3 midway: every other rank is stopped, the summary names rank 3, its host
# and its stderr, dslaunch exits non-zero, nothing is left.
case_rank_fails() {
    write_job fail.lua
    run_job
    [[ $rc != 0 ]] || fail "exit status 0 after a rank failed"
    has "$job/err" "rank 3 on 127.0.0.3 exited with code 3" || fail "summary does not name rank 3, its host and code"
    has "$job/err" "rank 3 is failing on purpose" || fail "summary lacks rank 3's last stderr lines"
    for r in 0 1 2; do grep -Eq "^dslaunch: +$r +127\.0\.0\.[23] +stopped by signal 15" "$job/err" || fail "rank $r not reported stopped"; done
    assert_no_orphans
}

# SIGINT to dslaunch stops the whole job the same way.
case_sigint() {
    write_job spin.lua
    start_job_bg
    all_ready() { for r in 0 1 2 3; do has "$logs/rank-$r.out" "ready $r" || return 1; done; }
    wait_for 20 "every rank to be running" all_ready
    kill -INT "$dl_pid"
    wait_job_bg
    [[ $rc == 130 ]] || fail "exit status $rc after SIGINT, expected 130"
    has "$job/err" "interrupted by SIGINT" || fail "summary does not say it was interrupted"
    assert_no_orphans
}

# A node's agent killed with SIGKILL: its workers die with it (death signal, lifeline),
# the controller notices the node is gone and stops the rest.
case_agent_killed() {
    write_job spin.lua
    start_job_bg
    all_ready() { for r in 0 1 2 3; do has "$logs/rank-$r.out" "ready $r" || return 1; done; }
    wait_for 20 "every rank to be running" all_ready
    agent=$(agent_pid 1)
    [[ -n $agent ]] || fail "cannot find node 1's agent"
    kill -KILL $agent
    wait_job_bg
    [[ $rc != 0 ]] || fail "exit status 0 after an agent died"
    has "$job/err" "node 1 (127.0.0.3)" || fail "summary does not name the lost node"
    assert_no_orphans
}

# dslaunch itself killed with SIGKILL: every agent sees its stdin close (and its store
# connection drop), stops its workers and exits. Nothing of the job may survive.
case_controller_killed() {
    write_job spin.lua
    start_job_bg
    all_ready() { for r in 0 1 2 3; do has "$logs/rank-$r.out" "ready $r" || return 1; done; }
    wait_for 20 "every rank to be running" all_ready
    kill -KILL "$dl_pid"
    wait "$dl_pid" 2>/dev/null
    # agents give workers the grace period (3 s) after TERM, then KILL
    wait_for 6 "every process of $name to be gone after dslaunch died ($(job_pids | tr '\n' ' '))" no_job_processes
}

# An agent that stops heartbeating (SIGSTOP: alive, connected, silent) is declared lost
# after heartbeat_timeout; the job stops. A stopped agent cannot act on a closed channel,
# so dslaunch kills it and its ranks over a second SSH channel: nothing may be left
# behind, without ever resuming the agent.
case_heartbeat_lost() {
    write_job spin.lua "[restart]" "heartbeat_interval = 0.2" "heartbeat_timeout = 1"
    start_job_bg
    all_ready() { for r in 0 1 2 3; do has "$logs/rank-$r.out" "ready $r" || return 1; done; }
    wait_for 20 "every rank to be running" all_ready
    agent=$(agent_pid 1)
    [[ -n $agent ]] || fail "cannot find node 1's agent"
    bg_pids+=("$agent")
    kill -STOP $agent
    start=$SECONDS
    wait_job_bg
    [[ $rc != 0 ]] || fail "exit status 0 after a node went silent"
    has "$job/logs/$name/latest/launcher.log" "node 1 (127.0.0.3): killing its agent and ranks over a second channel" ||
        fail "launcher.log does not show the second-channel kill"
    ((SECONDS - start <= 5)) || fail "took $((SECONDS - start)) s to notice a 1 s heartbeat timeout"
    has "$job/err" "node 1 (127.0.0.3): no heartbeat for" || fail "summary does not name the silent node"
    assert_no_orphans
}

# Ranks leave daemons behind (new session, out of their process group): the agents, as
# child subreapers, still find and kill them; the job itself succeeds.
case_daemon_child() {
    write_job daemon.lua
    run_job
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0"
    for r in 0 1 2 3; do has "$logs/rank-$r.out" "left a daemon $r" || fail "rank $r did not run"; done
    assert_no_orphans
}

# Authentication through ssh-agent when the job names no identity.
case_ssh_agent() {
    write_job hello.lua
    sed -i '/^identity = /d' "$job/job.ini"
    eval "$(ssh-agent -s -a "$job/agent.sock")" > /dev/null || fail "cannot start ssh-agent"
    bg_pids+=("$SSH_AGENT_PID")
    ssh-add -q "$SSH_IDENTITY" 2> /dev/null || fail "ssh-add failed"
    run_job
    [[ $rc == 0 ]] || fail "exit status $rc with the key in ssh-agent, expected 0"
    for r in 0 1 2 3; do has "$logs/rank-$r.out" "rank $r of 4 past the barrier" || fail "rank $r did not run"; done
    assert_no_orphans
}

case_host_key_changed() {
    write_job hello.lua
    echo "[127.0.0.3]:$SSHD_PORT $SSH_OTHER_HOST_KEY" > "$job/known_hosts"
    grep "^\[127.0.0.2\]" "$SSH_KNOWN_HOSTS" >> "$job/known_hosts"
    sed -i "s#^known_hosts = .*#known_hosts = $job/known_hosts#" "$job/job.ini"
    run_job
    [[ $rc != 0 ]] || fail "exit status 0 with a changed host key"
    has "$job/err" "host key of \[127.0.0.3\]:$SSHD_PORT has CHANGED" || fail "error does not name the host and the change"
    has "$job/err" "ssh-ed25519 SHA256:" || fail "error does not give the key type and fingerprint"
    has "$job/err" "ssh-keygen -R" || fail "error does not say what to do"
    ! has "$logs/rank-2.out" "past the barrier" || fail "a rank ran on the refused node"
    assert_no_orphans
}

# Unknown key: refused by default, recorded and accepted with accept-new.
case_host_key_unknown() {
    write_job hello.lua
    : > "$job/known_hosts"
    sed -i "s#^known_hosts = .*#known_hosts = $job/known_hosts#" "$job/job.ini"
    run_job
    [[ $rc != 0 ]] || fail "exit status 0 with an unknown host key"
    has "$job/err" "host key of \[127.0.0.[23]\]:$SSHD_PORT is unknown" || fail "error does not say the key is unknown"
    has "$job/err" "accept-new" || fail "error does not say what to do"
    printf 'host_key_check = accept-new\n' >> "$job/job.ini"
    run_job
    [[ $rc == 0 ]] || fail "accept-new: exit status $rc, expected 0"
    [[ $(grep -c "^\[127.0.0.[23]\]:$SSHD_PORT ssh-ed25519 " "$job/known_hosts") == 2 ]] || fail "accept-new did not record both keys"
    assert_no_orphans
}

case_bad_identity() {
    write_job hello.lua
    ssh-keygen -q -t ed25519 -N '' -f "$job/stranger"
    sed -i "s#^identity = .*#identity = $job/stranger#" "$job/job.ini"
    run_job
    [[ $rc != 0 ]] || fail "exit status 0 with a key the node does not know"
    has "$job/err" "public-key authentication failed" || fail "no clear authentication error"
    has "$job/err" "$job/stranger" || fail "error does not name the identity tried"
    assert_no_orphans
}

# Nothing listens on the port of 127.0.0.3: refused at once, a clear error.
case_unreachable() {
    write_job hello.lua
    # sshd listens on 127.0.0.2-17 only at its port; 127.0.0.18 has nothing.
    printf '127.0.0.2 slots=2\n127.0.0.18 slots=2\n' > "$job/hosts"
    start=$SECONDS
    run_job
    [[ $rc != 0 ]] || fail "exit status 0 with an unreachable node"
    ((SECONDS - start <= 6)) || fail "took $((SECONDS - start)) s, more than the 5 s connect timeout"
    has "$job/err" "127.0.0.18:$SSHD_PORT: cannot connect" || fail "error does not name the unreachable node"
    assert_no_orphans
}

# A node that accepts TCP but never speaks SSH: error within the connect timeout.
case_connect_timeout() {
    coproc SILENT { "$SILENT_PORT" 127.0.0.4; }
    bg_pids+=("$SILENT_PID")
    read -r port <&"${SILENT[0]}" || fail "silent_port did not start"
    write_job hello.lua
    sed -i "s#^port = .*#port = $port#; s#^connect_timeout = .*#connect_timeout = 2#" "$job/job.ini"
    printf '127.0.0.4 slots=1\n' > "$job/hosts"
    start=$SECONDS
    run_job
    [[ $rc != 0 ]] || fail "exit status 0 with a silent node"
    ((SECONDS - start <= 4)) || fail "took $((SECONDS - start)) s, connect timeout is 2 s"
    has "$job/err" "127.0.0.4:$port: no answer within the connect timeout (2 s)" || fail "error does not say it timed out"
    assert_no_orphans
}

# A client with a wrong token is dropped and logged; the job goes on and succeeds.
case_bad_token() {
    write_job token.lua "[env]" "FLAG_FILE = $job/flag"
    start_job_bg
    listening() { has "$job/logs/$name/latest/launcher.log" "store listening on"; }
    wait_for 20 "the store to listen" listening
    all_ready() { for r in 0 1 2 3; do has "$logs/rank-$r.out" "waiting $r" || return 1; done; }
    wait_for 20 "every rank to be waiting" all_ready
    addr=$(sed -n 's/.*store listening on \([0-9.]*\):\([0-9]*\).*/\1 \2/p' "$job/logs/$name/latest/launcher.log")
    set -- $addr
    # AUTH frame: u32 length 69, op 1, u32 version 1, 64 wrong hex chars.
    exec {fd}<>/dev/tcp/$1/$2 || fail "cannot reach the store at $1:$2"
    printf '\x00\x00\x00\x45\x01\x00\x00\x00\x01%s' "$(printf '0%.0s' $(seq 64))" >&$fd
    timeout 5 cat <&$fd > /dev/null # returns when the store closes the connection
    [[ $? == 0 ]] || fail "the store did not drop the client with the wrong token"
    exec {fd}>&-
    dropped() { has "$job/logs/$name/latest/launcher.log" "store: dropped client"; }
    wait_for 10 "launcher.log to record the dropped client" dropped
    touch "$job/flag"
    wait_job_bg
    [[ $rc == 0 ]] || fail "exit status $rc after a bad client, expected 0 (job must be unaffected)"
    for r in 0 1 2 3; do has "$logs/rank-$r.out" "done $r" || fail "rank $r did not finish"; done
    assert_no_orphans
}

"case_$case_name"
[[ -n ${KEEP_WORK:-} ]] || rm -rf "$job" # kept when a case fails (or KEEP_WORK is set), for its logs
echo "PASS [$case_name]"
