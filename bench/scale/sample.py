#!/usr/bin/env python3
"""Runs dslaunch and samples it from /proc until it exits (bench/scale/run.sh).

sample.py OUT_JSON STDOUT STDERR WATCH COMMAND...: every 50 ms reads the controller's CPU
time per thread (the store's thread is named ds-store), its open descriptors, its peak
RSS, the TCP connections established to its store's port, its children (local agents,
or relays), and the CPU time of the job's relays (`dslaunch --relay --job NAME-...`, with
NAME from $SAMPLE_JOB, wherever they were started from); writes the peaks, the CPU
time when the file WATCH first appeared (rank 0's log: its first output comes after the
first barrier), the exact CPU time of the whole process (read from the zombie) and its
exit status as JSON. With SAMPLE_IDLE_FROM and SAMPLE_IDLE_FOR (seconds) it also
measures the main thread's CPU time (from schedstat: nanoseconds, not clock ticks) in
the window that starts SAMPLE_IDLE_FROM seconds after WATCH appeared and lasts
SAMPLE_IDLE_FOR: the controller's cost in a steady state (bench/scale/run.sh IDLE_S)."""
import json, os, subprocess, sys, time

out = sys.argv[1]
watch = sys.argv[4]
at_watch = None
proc = subprocess.Popen(sys.argv[5:], stdout=open(sys.argv[2], "w"), stderr=open(sys.argv[3], "w"))
pid = proc.pid
tick = os.sysconf("SC_CLK_TCK")
peak = {"fds": 0, "conns": 0, "children": 0}
cpu = {"main": 0.0, "store": 0.0, "relay": 0.0, "other": 0.0}
relay_cpu = {}  # relay pid -> its CPU time (all threads), as last sampled
rss_kb = 0
store_port = None
idle_from = float(os.environ.get("SAMPLE_IDLE_FROM", "0"))
idle_for = float(os.environ.get("SAMPLE_IDLE_FOR", "0"))
watch_t = None
idle = []  # (time, main thread's CPU s) at the window's start and end
relay_mark = b"--relay\0--job\0" + os.environ.get("SAMPLE_JOB", "?").encode() + b"-"


def listen_ports():
    """Ports pid listens on (TCP state 0A), from the inodes of its sockets."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:
                ports.append(int(f[1].rsplit(":", 1)[1], 16))
    return ports


def established_to(port):
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                next(fh)
                for line in fh:
                    f = line.split(None, 4)
                    if f[3] == "01" and int(f[1].rsplit(":", 1)[1], 16) == port:
                        n += 1
        except OSError:
            pass
    return n


status = None
while status is None:
    try:
        tasks = {}
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                st = fh.read()
            name = st[st.index("(") + 1:st.rindex(")")]
            fields = st[st.rindex(")") + 2:].split()
            tasks[tid] = (name, (int(fields[11]) + int(fields[12])) / tick)
        c = {"main": 0.0, "store": 0.0, "relay": 0.0, "other": 0.0}
        for tid, (name, secs) in tasks.items():
            key = "main" if int(tid) == pid else "store" if name == "ds-store" else "relay" if name == "ds-relay" else "other"
            c[key] += secs
        for k in c:
            cpu[k] = max(cpu[k], c[k])
        if at_watch is None and os.path.exists(watch):
            at_watch = c["main"] + c["store"] + c["other"]
            watch_t = time.monotonic()
        if idle_for and watch_t is not None and len(idle) < 2:
            t = time.monotonic()
            if t >= watch_t + idle_from + len(idle) * idle_for:
                with open(f"/proc/{pid}/task/{pid}/schedstat") as fh:
                    idle.append((t, int(fh.read().split()[0]) / 1e9))
        peak["fds"] = max(peak["fds"], len(os.listdir(f"/proc/{pid}/fd")))
        kids = 0
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open(f"/proc/{p}/stat") as fh:
                    st = fh.read()
            except OSError:
                continue
            fields = st[st.rindex(")") + 2:].split()
            kids += int(fields[1]) == pid
            if st[st.index("(") + 1:st.rindex(")")] != "dslaunch":
                continue
            try:
                if relay_mark in open(f"/proc/{p}/cmdline", "rb").read():
                    relay_cpu[p] = max(relay_cpu.get(p, 0.0), (int(fields[11]) + int(fields[12])) / tick)
            except OSError:
                pass
        peak["children"] = max(peak["children"], kids)
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    rss_kb = int(line.split()[1])
        if store_port is None:
            ports = listen_ports()
            store_port = ports[0] if ports else None
        if store_port is not None:
            peak["conns"] = max(peak["conns"], established_to(store_port))
    except (OSError, ValueError):
        pass  # ending
    time.sleep(0.05)
    # Exited: a zombie still shows its own CPU time (every thread's, not its children's).
    if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        total = (int(fields[11]) + int(fields[12])) / tick
        status = os.waitpid(pid, 0)[1]

json.dump({"exit": os.waitstatus_to_exitcode(status), "cpu_total_s": round(total, 3),
           "cpu_to_watch_s": round(at_watch, 3) if at_watch is not None else None,
           "cpu_main_s": round(total - cpu["store"] - cpu["relay"] - cpu["other"], 3),
           "cpu_store_s": round(cpu["store"], 3), "cpu_relay_thread_s": round(cpu["relay"], 3),
           "relays_cpu_s": round(sum(relay_cpu.values()), 3),
           "relay_cpu_max_s": round(max(relay_cpu.values(), default=0.0), 3),
           "fds_peak": peak["fds"], "store_connections_peak": peak["conns"], "children_peak": peak["children"],
           "rss_mb": round(rss_kb / 1024, 1),
           **({"idle_window_s": round(idle[1][0] - idle[0][0], 3), "idle_main_cpu_s": round(idle[1][1] - idle[0][1], 4)}
              if len(idle) == 2 else {})}, open(out, "w"))
