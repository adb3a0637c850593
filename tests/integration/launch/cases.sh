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

# `::1 slots=2` is this node over IPv6: the store listens on [::1] and the ranks meet there.
case_ipv6_local() {
    if ! ip -6 addr show dev lo 2>/dev/null | grep -q 'inet6 ::1/'; then
        echo "SKIP [$case_name]: this machine has no IPv6 loopback (::1)" >&2
        rm -rf "$job"
        exit 77
    fi
    printf '::1 slots=2\n' > "$job/hosts"
    printf '[job]\nname = %s\nscript = hello.lua\ndsrun = %s\n[resources]\nhostfile = hosts\ndevice = cpu\n' \
        "$name" "$DSRUN" > "$job/job.ini"
    run_job
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0"
    has "$job/logs/$name/latest/launcher.log" "store listening on \[::1\]:" || fail "the store is not on [::1]"
    for r in 0 1; do has "$logs/rank-$r.out" "rank $r of 2 past the barrier" || fail "rank $r did not pass the barrier"; done
    assert_no_orphans
}

# 2 nodes x 2 slots over SSH: barrier, every rank prints, logs in the right files,
# long lines, binary bytes and a last line without newline intact.
# [launch] max_handshakes = 1: the second node's SSH session opens after the first's.
case_bounded_start() {
    write_job hello.lua '[launch]' 'max_handshakes = 1'
    run_job
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0"
    has "$job/logs/$name/latest/launcher.log" "node 1 (127.0.0.3) and the next ones wait: 1 SSH sessions opening at once" ||
        fail "launcher.log does not say node 1 waited for a handshake slot"
    first=$(grep -n "node 0 (127.0.0.2): SSH session open" "$job/logs/$name/latest/launcher.log" | cut -d: -f1)
    second=$(grep -n "node 1 (127.0.0.3): connecting over SSH" "$job/logs/$name/latest/launcher.log" | cut -d: -f1)
    [[ -n $first && -n $second ]] && ((first < second)) || fail "node 1 began connecting before node 0's session was open"
    assert_no_orphans
}

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

# Past [launch] relay_threshold: one relay (dslaunch --relay, started over SSH on
# 127.0.0.2) starts node 0's agent there by fork/exec and node 1's over its own SSH
# session to 127.0.0.3, and carries both nodes' control streams: the controller opens
# one SSH session, and every line still arrives tagged and in its file.
case_relay_ssh() {
    write_job hello.lua '[launch]' 'relay_threshold = 1' 'relay_fanout = 2'
    run_job
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0"
    local ll="$job/logs/$name/latest/launcher.log"
    has "$ll" "relay 0 on 127.0.0.2 (nodes 0-1): connecting over SSH" || fail "launcher.log does not say the relay connected over SSH"
    ! grep -q "connecting over SSH (" "$ll" || fail "the controller opened a node's SSH session itself"
    for r in 0 1 2 3; do
        host=127.0.0.$((2 + r / 2))
        grep -aq "^\[$host:$r\] rank $r of 4 past the barrier$" "$job/out" || fail "terminal lacks rank $r's line tagged [$host:$r]"
        has "$logs/rank-$r.err" "to stderr from rank $r" || fail "rank-$r.err lacks its line"
    done
    assert_no_orphans
}

# The relay killed mid-run: both its nodes are lost and the summary names the relay's
# host and nodes; its agents see their stdin close (node 0's) or their SSH session drop
# (node 1's) and stop their ranks: nothing is left.
case_relay_ssh_killed() {
    write_job spin.lua '[launch]' 'relay_threshold = 1' 'relay_fanout = 2'
    start_job_bg
    all_ready() { for r in 0 1 2 3; do has "$logs/rank-$r.out" "ready $r" || return 1; done; }
    wait_for 20 "every rank to be running" all_ready
    local relay
    relay=$(pgrep -f -- "--relay --job $name-[0-9a-f]{8}\$")
    [[ -n $relay ]] || fail "cannot find the relay"
    kill -KILL $relay
    wait_job_bg
    [[ $rc != 0 ]] || fail "exit status 0 after the relay died"
    has "$job/err" "lost with its relay (dslaunch --relay on 127.0.0.2, pid $relay, for nodes 0-1)" ||
        fail "the summary does not name the relay, its host and its nodes"
    wait_for 8 "every process of $name to be gone ($(job_pids | tr '\n' ' '))" no_job_processes
}

# A relayed node's agent goes silent (SIGSTOP): the controller declares it lost by its
# heartbeats and stops the job; the relay, told to stop that node, kills the agent over
# a second SSH channel once the grace period is over. Nothing is left.
case_relay_heartbeat_lost() {
    write_job spin.lua '[launch]' 'relay_threshold = 1' 'relay_fanout = 2' '[restart]' 'heartbeat_interval = 0.2' \
        'heartbeat_timeout = 1'
    start_job_bg
    all_ready() { for r in 0 1 2 3; do has "$logs/rank-$r.out" "ready $r" || return 1; done; }
    wait_for 20 "every rank to be running" all_ready
    agent=$(agent_pid 1)
    [[ -n $agent ]] || fail "cannot find node 1's agent"
    bg_pids+=("$agent")
    kill -STOP $agent
    wait_job_bg
    [[ $rc != 0 ]] || fail "exit status 0 after a node went silent"
    has "$job/err" "node 1 (127.0.0.3): no heartbeat for" || fail "summary does not name the silent node"
    wait_for 10 "every process of $name to be gone ($(job_pids | tr '\n' ' '))" no_job_processes
}

# A relay that cannot start (its node unreachable): every node of its share fails with
# the relay's host, its nodes and the SSH error, within the connect timeout.
case_relay_unreachable() {
    write_job hello.lua '[launch]' 'relay_threshold = 1' 'relay_fanout = 2'
    printf '127.0.0.18 slots=2\n127.0.0.2 slots=2\n' > "$job/hosts"
    start=$SECONDS
    run_job
    [[ $rc != 0 ]] || fail "exit status 0 with an unreachable relay"
    ((SECONDS - start <= 6)) || fail "took $((SECONDS - start)) s, more than the 5 s connect timeout"
    has "$job/err" "its relay (dslaunch --relay on 127.0.0.18, for nodes 0-1) did not start: .*127.0.0.18:$SSHD_PORT: cannot connect" ||
        fail "the error does not name the relay, its nodes and why"
    assert_no_orphans
}

# A node the relay cannot reach: that node fails with the SSH error the relay met; the
# relay's own node is stopped; nothing is left.
case_relay_node_unreachable() {
    write_job hello.lua '[launch]' 'relay_threshold = 1' 'relay_fanout = 2'
    printf '127.0.0.2 slots=2\n127.0.0.18 slots=2\n' > "$job/hosts"
    run_job
    [[ $rc != 0 ]] || fail "exit status 0 with an unreachable node"
    has "$job/err" "node 1 (127.0.0.18): .*127.0.0.18:$SSHD_PORT: cannot connect" || fail "the error does not name node 1 and why"
    assert_no_orphans
}

# dslaunch itself killed: the relay sees its stdin close and closes its agents' stdin;
# they stop their ranks. Nothing of the job may survive.
case_relay_controller_killed() {
    write_job spin.lua '[launch]' 'relay_threshold = 1' 'relay_fanout = 2'
    start_job_bg
    all_ready() { for r in 0 1 2 3; do has "$logs/rank-$r.out" "ready $r" || return 1; done; }
    wait_for 20 "every rank to be running" all_ready
    kill -KILL "$dl_pid"
    wait "$dl_pid" 2>/dev/null
    wait_for 8 "every process of $name to be gone after dslaunch died ($(job_pids | tr '\n' ' '))" no_job_processes
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

# A program that is not Lua runs as a process per rank, with torchrun's environment and
# MASTER_PORT checked free on node 0; a MASTER_PORT in use there stops the job, naming it.
case_program_master_port() {
    printf '#!/bin/sh\necho "rank $RANK port $MASTER_PORT addr $MASTER_ADDR args $*"\n' > "$job/env.sh"
    chmod +x "$job/env.sh"
    write_job env.sh "[job]" "args = 'one two' three"
    run_job --local_rank_arg
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0"
    port=$(sed -n 's/^\[127.0.0.2:0\] rank 0 port \([0-9]*\) .*/\1/p' "$job/out")
    [[ -n $port ]] || fail "rank 0 did not print its MASTER_PORT"
    for r in 0 1 2 3; do
        grep -q "^\[127.0.0.$((2 + r / 2)):$r\] rank $r port $port addr 127.0.0.2 args one two three --local_rank=$((r % 2))$" "$job/out" ||
            fail "rank $r's line: $(grep "rank $r " "$job/out")"
    done
    coproc BUSY { "$SILENT_PORT" 127.0.0.2; }
    bg_pids+=("$BUSY_PID")
    read -r busy <&"${BUSY[0]}" || fail "silent_port did not start"
    run_job --master_port "$busy"
    [[ $rc != 0 ]] || fail "exit status 0 with MASTER_PORT $busy in use on node 0"
    has "$job/err" "node 0 (127.0.0.2): MASTER_PORT $busy is in use on this node" || fail "the error does not name the port and the node"
    assert_no_orphans
}

# A program's own account of its failure (PyTorch's TORCHELASTIC_ERROR_FILE, as @record
# writes it) names the root cause, not the order of exits: rank 0 reports a peer's failure
# through the transport (a consequence), then rank 1 the error that started it and takes
# 2 s to end, so rank 0 both errs and exits first. The summary names rank 1 and its error.
case_program_error_file() {
    cat > "$job/err.sh" <<'SH'
#!/bin/sh
dir=$(dirname "$TORCHELASTIC_ERROR_FILE")
wait_for() { while [ ! -e "$1" ]; do sleep 0.05; done; }
if [ "$RANK" = 0 ]; then
    printf '{"message": {"message": "RuntimeError: [gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:4242", "extraInfo": {"py_callstack": "Traceback: rank 0", "timestamp": "1"}}}' > "$TORCHELASTIC_ERROR_FILE.tmp"
    mv "$TORCHELASTIC_ERROR_FILE.tmp" "$TORCHELASTIC_ERROR_FILE"
    wait_for "$dir/rank-1.json"
    exit 1
fi
wait_for "$dir/rank-0.json"
sleep 0.1 # the files' times differ by more than the clock's tick
printf '{"message": {"message": "ValueError: bad batch 7 on rank 1", "extraInfo": {"py_callstack": "Traceback (most recent call last):\\n  File \\"train.py\\", line 9", "timestamp": "1"}}}' > "$TORCHELASTIC_ERROR_FILE.tmp"
mv "$TORCHELASTIC_ERROR_FILE.tmp" "$TORCHELASTIC_ERROR_FILE"
sleep 2
exit 1
SH
    chmod +x "$job/err.sh"
    {
        printf '[job]\nname = %s\nscript = err.sh\ndsrun = %s\n' "$name" "$DSRUN"
        printf '[resources]\nnum_gpus = 2\ndevice = cpu\n'
    } > "$job/job.ini"
    run_job
    [[ $rc == 1 ]] || fail "exit status $rc, expected 1"
    has "$job/err" "FAILED after .*: rank 1 on localhost failed: ValueError: bad batch 7 on rank 1" ||
        fail "the summary does not name rank 1's error: $(grep FAILED "$job/err")"
    grep -aq "^dslaunch: *1 .*<- root cause" "$job/err" || fail "rank 1 is not marked the root cause"
    has "$job/logs/$name/latest/launcher.log" "Connection closed by peer" ||
        fail "launcher.log lacks rank 0's error"
    ls -d "${TMPDIR:-/tmp}/dsrun-errors-$name-"* 2>/dev/null | grep -q . && fail "the job's error-file directory was left behind"
    assert_no_orphans
}

# The environment reaches every rank on every node (not only local ones): DeepSpeed's
# prefixes from dslaunch's environment, .deepspeed_env and .dslaunch_env, --export, [env].
case_env_remote() {
    printf '#!/bin/sh\necho "rank $RANK: $NCCL_DS_TEST $FROM_FILE $MINE $FROM_SPEC ${DS_STORE_TOKEN:-no token}"\n' > "$job/env.sh"
    printf 'FROM_FILE="from a file"\n' > "$job/.deepspeed_env"
    write_job env.sh "[env]" "FROM_SPEC = spec"
    NCCL_DS_TEST=nccl MINE=mine timeout -s KILL 45 "$DSLAUNCH" --export MINE "$job/job.ini" > "$job/out" 2> "$job/err"
    rc=$?
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0"
    for r in 0 1 2 3; do
        grep -q "^\[127.0.0.$((2 + r / 2)):$r\] rank $r: nccl from a file mine spec no token$" "$job/out" ||
            fail "rank $r's environment: $(grep "rank $r:" "$job/out")"
    done
    assert_no_orphans
}

# SSH as users set it up: an ssh_config with aliases, per-host ports and users, and
# ProxyJump through two hops. Node 0 (alias "first") is the fixture sshd on 127.0.0.2;
# node 1 (alias "inner") is a second sshd on 127.0.0.20 and another port, reached through
# "bastion" (a third sshd on 127.0.0.19, logged in as nobody, who has no shell: only the
# forwarding) and then the fixture sshd on 127.0.0.3. On loopback nothing stops a direct
# connection, so the test proves the path: bastion logs nobody's login, and with bastion
# stopped the job fails naming it. accept-new creates the known_hosts file and its
# directory (0700). No job spec: a hostfile and the program are enough.
case_proxy_jump() {
    id nobody > /dev/null 2>&1 || fail "no user nobody on this machine"
    local inner=$WORK/$name-inner bastion=$WORK/$name-bastion
    SSHD_LISTEN=127.0.0.20 SSHD_USER_KEY=$SSH_IDENTITY "$here/sshd.sh" start "$inner" > /dev/null || fail "inner sshd"
    bg_cleanup+=("$here/sshd.sh stop $inner")
    SSHD_LISTEN=127.0.0.19 SSHD_USERS=nobody SSHD_USER_KEY=$SSH_IDENTITY SSHD_LOG_LEVEL=VERBOSE \
        "$here/sshd.sh" start "$bastion" > /dev/null || fail "bastion sshd"
    bg_cleanup+=("$here/sshd.sh stop $bastion")
    inner_port=$(. "$inner/env" && echo "$SSHD_PORT")
    bastion_port=$(. "$bastion/env" && echo "$SSHD_PORT")
    cat > "$job/ssh_config" <<CFG
# the nodes, by the names the hostfile uses
Host first
    HostName 127.0.0.2
    Port $SSHD_PORT
Host inner
    HostName 127.0.0.20
    Port $inner_port
    ProxyJump bastion,root@127.0.0.3:$SSHD_PORT
Host bastion
    HostName 127.0.0.19
    Port $bastion_port
    User nobody
Host *
    User root
    IdentityFile $SSH_IDENTITY
    IdentitiesOnly yes
    UserKnownHostsFile $job/ssh/known_hosts
    StrictHostKeyChecking accept-new
    ConnectTimeout 5
    ServerAliveInterval 2
CFG
    printf 'first slots=2\ninner slots=2\n' > "$job/hosts"
    printf '#!/bin/sh\necho "rank $RANK on $DS_HOST master $MASTER_ADDR"\n' > "$job/where.sh"
    chmod +x "$job/where.sh"
    run_plain() {
        (cd "$job" && timeout -s KILL 45 "$DSLAUNCH" --hostfile hosts --set ssh.config=ssh_config \
            --set job.name="$name" --set job.dsrun="$DSRUN" where.sh > out 2> err)
        rc=$?
    }
    run_plain
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0"
    for r in 0 1 2 3; do
        host=127.0.0.$((r < 2 ? 2 : 20))
        grep -q "^\[$host:$r\] rank $r on $host master 127.0.0.2$" "$job/out" || fail "rank $r's line: $(grep "rank $r " "$job/out")"
    done
    grep -q "Accepted publickey for nobody from 127.0.0.1" "$bastion/sshd.log" || fail "bastion did not see nobody log in (no ProxyJump?)"
    has "$job/logs/$name/latest/launcher.log" "node 1 (127.0.0.20): connecting over SSH (root@127.0.0.20 port $inner_port via nobody@127.0.0.19:$bastion_port,root@127.0.0.3:$SSHD_PORT)" ||
        fail "launcher.log does not show the hops"
    [[ $(stat -c %a "$job/ssh") == 700 ]] || fail "accept-new made $job/ssh with mode $(stat -c %a "$job/ssh"), expected 700"
    for hp in 127.0.0.2:$SSHD_PORT 127.0.0.19:$bastion_port 127.0.0.3:$SSHD_PORT 127.0.0.20:$inner_port; do
        grep -q "^\[${hp%:*}\]:${hp#*:} ssh-ed25519 " "$job/ssh/known_hosts" || fail "accept-new did not record $hp"
    done
    # --dry-run shows the aliases and the addresses they stand for
    (cd "$job" && "$DSLAUNCH" --dry-run --hostfile hosts --set ssh.config=ssh_config where.sh > plan.json) || fail "--dry-run"
    tr -d ' \n' < "$job/plan.json" | grep -q '"host":"127.0.0.20","alias":"inner","node_rank":1' || fail "the plan lacks inner's alias"
    "$here/sshd.sh" stop "$bastion"
    run_plain
    [[ $rc != 0 ]] || fail "exit status 0 with bastion stopped"
    has "$job/err" "127.0.0.19:$bastion_port (ProxyJump host of inner): cannot connect" || fail "the error does not name the ProxyJump host"
    assert_no_orphans
}

# A python with torch (Debian's python3-torch), or skip the case saying why (exit 77).
torch_python() {
    for py in /usr/bin/python3 python3; do
        if "$py" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
            command -v "$py"
            return
        fi
    done
    echo "SKIP [$case_name]: no python3 with torch and Gloo here (scripts/install-deps.sh installs python3-torch)" >&2
    rm -rf "$job"
    return 77
}

# run_ddp PYTHON ARGS...: the DDP program as a plain program (no Lua) on 2 nodes x 2 ranks,
# its interpreter and arguments given on the command line; sets rc.
run_ddp() {
    local py=$1
    shift
    cp "$here/scripts/ddp.py" "$job/"
    mkdir -p "$job/out" "$job/ref"
    write_job ddp.py "[env]" "GLOO_SOCKET_IFNAME = lo" "OMP_NUM_THREADS = 1"
    timeout -s KILL 110 "$DSLAUNCH" --set "job.interpreter=$py" "$job/job.ini" -- --out "$job/out" "$@" \
        > "$job/out.txt" 2> "$job/err"
    rc=$?
}

# PyTorch DDP over Gloo, as written for torchrun, started by dslaunch on 2 nodes x 2 ranks
# over SSH: its all-reduced gradients and final loss equal one process on the whole batch.
case_torch_ddp() {
    py=$(torch_python) || exit $?
    run_ddp "$py" --steps 3
    [[ $rc == 0 ]] || fail "exit status $rc, expected 0: $(tail -n 5 "$job/err")"
    for r in 0 1 2 3; do
        host=127.0.0.$((2 + r / 2)) node=$((r / 2))
        want="^\[$host:$r\] rank $r of 4: {\"GROUP_RANK\": \"$node\", \"LOCAL_RANK\": \"$((r % 2))\", \"LOCAL_WORLD_SIZE\": \"2\", \"MASTER_ADDR\": \"127.0.0.2\", \"MASTER_PORT\": \"[1-9][0-9]*\", \"NODE_RANK\": \"$node\", \"RANK\": \"$r\", \"ROLE_RANK\": \"$r\", \"TORCHELASTIC_RESTART_COUNT\": \"0\", \"TORCHELASTIC_RUN_ID\": \"$name-[0-9a-f]*\", \"WORLD_SIZE\": \"4\"}$"
        grep -q "$want" "$job/out.txt" || fail "rank $r's torchrun environment: $(grep "rank $r of" "$job/out.txt")"
    done
    "$py" "$job/ddp.py" --reference --steps 3 --out "$job/ref" || fail "the single-process run failed"
    "$py" "$here/scripts/ddp_compare.py" "$job/ref" "$job/out" 4 >&2 || fail "DDP differs from the single-process run"
    assert_no_orphans
}

# A rank of that program fails: the job stops, naming it, its code and its last words.
case_torch_rank_fails() {
    py=$(torch_python) || exit $?
    run_ddp "$py" --steps 3 --fail-rank 3
    [[ $rc == 1 ]] || fail "exit status $rc after a rank failed, expected 1"
    has "$job/err" "FAILED after .*: rank 3 on 127.0.0.3 exited with code 3" || fail "the summary does not name rank 3"
    has "$job/err" "rank 3 is failing on purpose" || fail "the summary lacks rank 3's last stderr lines"
    assert_no_orphans
}

"case_$case_name"
[[ -n ${KEEP_WORK:-} ]] || rm -rf "$job" # kept when a case fails (or KEEP_WORK is set), for its logs
echo "PASS [$case_name]"
