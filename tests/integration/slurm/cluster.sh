#!/usr/bin/env bash
# A private Slurm cluster on this machine, for the Slurm integration tests.
#   cluster.sh start DIR [NNODES]   slurmctld + NNODES (default 3) `slurmd -N nK` daemons,
#                                   all on 127.0.0.1 with their own ports; writes DIR/env
#   cluster.sh stop DIR             cancels every job, stops the daemons (pid files),
#                                   kills any slurmstepd left, removes DIR
#   cluster.sh restart-node DIR K   starts node nK's slurmd again (after a test killed it)
# Runs as root without munge, systemd or cgroups (auth/none, proctrack/linuxproc). DIR/env
# defines SLURM_CONF (honoured by daemons, clients and slurmstepd) and SLURM_NODES.
# Node names n1..nN are not host names: tests pass [rendezvous] addr = 127.0.0.1 and
# DS_NODE_ADDR = 127.0.0.1 so the store and Gloo bind to loopback.
set -euo pipefail

cmd=${1:?usage: cluster.sh start|stop|restart-node DIR [N]}
dir=${2:?usage: cluster.sh start|stop|restart-node DIR [N]}

pid_of() { [[ -s $1 ]] && cat "$1"; }

stop() {
    [[ -f $dir/slurm.conf ]] || { rm -rf "$dir"; return 0; }
    # SLURM_CONF only for scancel: the search below finds processes by it
    SLURM_CONF=$dir/slurm.conf scancel --full --quiet --signal=KILL --user="$(id -un)" 2>/dev/null || true
    for f in "$dir"/run/*.pid; do
        [[ -e $f ]] || continue
        p=$(pid_of "$f") || continue
        kill "$p" 2>/dev/null || true
    done
    # slurmstepd survives its slurmd: find every process of this cluster by its config.
    for _ in $(seq 50); do
        left=$(grep -lsaz -- "^SLURM_CONF=$dir/slurm.conf$" /proc/[0-9]*/environ | sed -n 's#^/proc/\([0-9]*\)/.*#\1#p' | grep -vx "$$" || true)
        for f in "$dir"/run/*.pid; do [[ -e $f ]] && p=$(pid_of "$f") && kill -0 "$p" 2>/dev/null && left+=" $p"; done
        [[ -z ${left// /} ]] && break
        kill -KILL $left 2>/dev/null || true
        sleep 0.1
    done
    rm -rf "$dir"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The first of n + 1 ports for slurmctld and the slurmds, outside the kernel's ephemeral
# range: a port inside it can be taken at any moment as the source port of an outgoing
# connection (port_free sees only listeners), and a slurmd that then cannot bind fails
# after it has daemonized, which no retry here sees ("Address already in use" in its
# log, the nodes never idle).
first_port() {
    local n=$1 eph_lo eph_hi lo hi
    read -r eph_lo eph_hi < /proc/sys/net/ipv4/ip_local_port_range
    # below both the ephemeral range and the test sshd's ports (launch/sshd.sh: 20000 up)
    if ((eph_lo >= 20000)); then lo=10000 hi=$((19999 - n))
    else lo=$((eph_hi + 1)) hi=$((65535 - n)); fi
    ((hi > lo)) || { echo "cluster.sh: no ports outside the ephemeral range $eph_lo-$eph_hi" >&2; exit 1; }
    echo $((lo + (RANDOM * 32768 + RANDOM) % (hi - lo + 1)))
}

write_conf() {
    local n=$1 port=$2
    cat > "$dir/slurm.conf" <<CONF
ClusterName=dslaunch-test
SlurmctldHost=localhost
SlurmctldPort=$port
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
PlugStackConfig=$dir/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=3
MessageTimeout=2
KillWait=5
# a requeued job may start again after cred_expire + 1 s (default 120): the requeue test waits for it
AuthInfo=cred_expire=5
SchedulerParameters=sched_interval=1
InactiveLimit=0
NodeName=n[1-$n] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$((port + 1))-$((port + n))] CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
}

start_slurmd() { slurmd -f "$dir/slurm.conf" -N "n$1"; }

nodes_idle() {
    local n=$1
    [[ $(sinfo -h -N -o '%N %t' 2>/dev/null | grep -c ' idle$') == "$n" ]]
}

wait_for() {
    local secs=$1 what=$2
    shift 2
    local end=$((SECONDS + secs))
    until "$@"; do
        if ((SECONDS >= end)); then
            echo "cluster.sh: timed out after ${secs}s waiting for $what" >&2
            tail -n 20 "$dir"/log/*.log >&2 || true
            return 1
        fi
        sleep 0.1
    done
}

case $cmd in
stop) stop ;;
restart-node)
    export SLURM_CONF=$dir/slurm.conf
    k=${3:?usage: cluster.sh restart-node DIR K}
    start_slurmd "$k"
    . "$dir/env"
    wait_for 30 "node n$k to be idle again" nodes_idle "$SLURM_NODES"
    ;;
start)
    n=${3:-3}
    for exe in slurmctld slurmd srun sbatch salloc scontrol; do
        command -v $exe >/dev/null || { echo "cluster.sh: $exe missing (scripts/install-deps.sh installs Slurm)" >&2; exit 1; }
    done
    stop
    mkdir -p "$dir"/{state,run,log,spool}
    : > "$dir/plugstack.conf"
    export SLURM_CONF=$dir/slurm.conf
    started=0
    for attempt in $(seq 20); do
        port=$(first_port "$n")
        ok=1
        for p in $(seq "$port" $((port + n))); do port_free "$p" || ok=0; done
        ((ok)) || continue
        write_conf "$n" "$port"
        slurmctld -f "$dir/slurm.conf" -i || continue # -i: ignore state from an earlier run
        for k in $(seq "$n"); do start_slurmd "$k"; done
        started=1
        break
    done
    ((started)) || { echo "cluster.sh: no free ports for slurmctld" >&2; exit 1; }
    printf 'SLURM_CONF=%s\nSLURM_NODES=%s\n' "$dir/slurm.conf" "$n" > "$dir/env"
    wait_for 30 "all $n nodes to be idle" nodes_idle "$n"
    echo "cluster.sh: slurmctld on port $port, nodes n[1-$n]"
    ;;
*) echo "usage: cluster.sh start|stop|restart-node DIR [N]" >&2; exit 2 ;;
esac
