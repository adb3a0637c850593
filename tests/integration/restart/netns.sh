#!/usr/bin/env bash
# Nodes that can die whole: each in a network namespace of its own, on a bridge in the
# test's namespace, with its own sshd (the launch tests' keys and user).
#   netns.sh up TAG N SSHD_DIR DIR   namespaces TAG-1..TAG-N at 10.B.C.2..N+1/24 (B.C from
#                                    TAG's number), bridge TAG-br at 10.B.C.1; writes
#                                    DIR/hosts (one address per line), DIR/known_hosts
#                                    and DIR/net (BRIDGE_ADDR)
#   netns.sh down TAG DIR            kills what runs in them, deletes them and the bridge
# TAG: letters and digits ending in a number (the test's pid), at most 10 characters.
set -euo pipefail
cmd=${1:?usage: netns.sh up TAG N SSHD_DIR DIR | down TAG DIR}
tag=${2:?tag}

down() {
    local dir=$1
    for ns in $(ip netns list | awk '{print $1}' | grep "^$tag-[0-9]*$" || true); do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
        ip netns delete "$ns" 2>/dev/null || true
    done
    ip link delete "$tag-br" 2>/dev/null || true
    [[ -n $dir ]] && rm -f "$dir"/sshd-*.pid
}

if [[ $cmd == down ]]; then
    down "${3:-}"
    exit 0
fi

n=${3:?N} sshd_dir=${4:?SSHD_DIR} dir=${5:?DIR}
. "$sshd_dir/env"
num=${tag##*[!0-9]}
b=$((20 + num / 250 % 200)) c=$((num % 250))
net="10.$b.$c"
mkdir -p "$dir"
down "$dir"
ip link add "$tag-br" type bridge
ip addr add "$net.1/24" dev "$tag-br"
ip link set "$tag-br" up
: > "$dir/hosts"
: > "$dir/known_hosts"
hostkey=$(cut -d' ' -f1,2 "$sshd_dir/host_ed25519.pub")
for i in $(seq 1 "$n"); do
    ns="$tag-$i" addr="$net.$((i + 1))"
    ip netns add "$ns"
    ip link add "$tag-v$i" type veth peer name eth0 netns "$ns"
    ip link set "$tag-v$i" master "$tag-br" up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    sed -e "s#^ListenAddress .*##" -e "s#^PidFile .*#PidFile $dir/sshd-$i.pid#" "$sshd_dir/sshd_config" > "$dir/sshd_config-$i"
    echo "ListenAddress $addr" >> "$dir/sshd_config-$i"
    ip netns exec "$ns" /usr/sbin/sshd -f "$dir/sshd_config-$i" -E "$dir/sshd-$i.log"
    echo "$addr" >> "$dir/hosts"
    echo "[$addr]:$SSHD_PORT $hostkey" >> "$dir/known_hosts"
done
for i in $(seq 1 "$n"); do
    for _ in $(seq 100); do [[ -s $dir/sshd-$i.pid ]] && break; sleep 0.02; done
    [[ -s $dir/sshd-$i.pid ]] || { echo "netns.sh: sshd in $tag-$i did not start" >&2; cat "$dir/sshd-$i.log" >&2; exit 1; }
done
echo "BRIDGE_ADDR=$net.1" > "$dir/net"
