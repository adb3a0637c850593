#!/usr/bin/env bash
# A private sshd for the launcher's integration tests and benchmark.
#   sshd.sh start DIR [NADDR]   keys generated now, sshd on 127.0.0.2..127.0.0.(NADDR+1)
#                               (default and most 16: sshd's MAX_LISTEN_SOCKS) on a free
#                               unprivileged port; writes DIR/env
#   sshd.sh stop DIR            stops it (by its pid file) and removes DIR
# DIR/env defines SSHD_PORT, SSH_IDENTITY (an ed25519 user key: libssh2 1.10 signs RSA
# only with SHA-1, which OpenSSH 9.2 refuses), SSH_KNOWN_HOSTS (host key of every address
# on that port) and SSH_OTHER_HOST_KEY (a second host key, for "changed key" tests).
# Sessions get HOME=DIR/home, so the login shell skips the machine's ~/.bashrc (which
# costs ~100 ms per command on the machines we measured).
# For a second or third sshd (the ProxyJump test), the environment may change:
#   SSHD_LISTEN="127.0.0.19 ..."  the addresses (instead of 127.0.0.2..)
#   SSHD_USERS="nobody root"      who may log in (default: the current user)
#   SSHD_USER_KEY=PATH            authorize this existing user key (no new one is made)
#   SSHD_LOG_LEVEL=VERBOSE        sshd's LogLevel (default ERROR; VERBOSE logs each login)
set -euo pipefail

cmd=${1:?usage: sshd.sh start|stop DIR [NADDR]}
dir=${2:?usage: sshd.sh start|stop DIR [NADDR]}
naddr=${3:-16}

stop() {
    if [[ -f $dir/sshd.pid ]]; then
        pid=$(cat "$dir/sshd.pid")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -rf "$dir"
}

if [[ $cmd == stop ]]; then
    stop
    exit 0
fi

[[ -x /usr/sbin/sshd ]] || { echo "sshd.sh: /usr/sbin/sshd missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
stop
mkdir -p "$dir/home"
# 0711: another user (SSHD_USERS) must reach authorized_keys; the host keys stay 0600
chmod 711 "$dir"
mkdir -p -m0755 /run/sshd 2>/dev/null || true # compiled-in privilege-separation path

ssh-keygen -q -t ed25519 -N '' -C dslaunch-test-host -f "$dir/host_ed25519"
ssh-keygen -q -t ed25519 -N '' -C dslaunch-test-other -f "$dir/other_host_ed25519"
if [[ -n ${SSHD_USER_KEY:-} ]]; then
    cp "$SSHD_USER_KEY" "$dir/id_ed25519" && cp "$SSHD_USER_KEY.pub" "$dir/id_ed25519.pub"
else
    ssh-keygen -q -t ed25519 -N '' -C dslaunch-test-user -f "$dir/id_ed25519"
fi
cp "$dir/id_ed25519.pub" "$dir/authorized_keys"
chmod 644 "$dir/authorized_keys"

user=${SSHD_USERS:-$(id -un)}
addrs=${SSHD_LISTEN:-$(for i in $(seq 2 $((naddr + 1))); do echo "127.0.0.$i"; done)}
listen=""
for a in $addrs; do listen+="ListenAddress $a"$'\n'; done

started=0
for attempt in $(seq 20); do
    port=$((20000 + (RANDOM % 20000)))
    cat > "$dir/sshd_config" <<CFG
Port $port
$listen
HostKey $dir/host_ed25519
PidFile $dir/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
AllowUsers $user
StrictModes no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
MaxStartups 200:30:400
MaxSessions 200
LogLevel ${SSHD_LOG_LEVEL:-ERROR}
SetEnv HOME=$dir/home
CFG
    if /usr/sbin/sshd -f "$dir/sshd_config" -E "$dir/sshd.log"; then
        for _ in $(seq 50); do [[ -s $dir/sshd.pid ]] && break; sleep 0.1; done
        if [[ -s $dir/sshd.pid ]] && kill -0 "$(cat "$dir/sshd.pid")" 2>/dev/null; then
            started=1
            break
        fi
    fi
done
if [[ $started != 1 ]]; then
    echo "sshd.sh: sshd would not start; its log:" >&2
    cat "$dir/sshd.log" >&2 || true
    exit 1
fi

hostkey=$(cut -d' ' -f1,2 "$dir/host_ed25519.pub")
: > "$dir/known_hosts"
for a in $addrs; do echo "[$a]:$port $hostkey" >> "$dir/known_hosts"; done
cat > "$dir/env" <<ENV
SSHD_PORT=$port
SSH_IDENTITY=$dir/id_ed25519
SSH_KNOWN_HOSTS=$dir/known_hosts
SSH_OTHER_HOST_KEY="$(cut -d' ' -f1,2 "$dir/other_host_ed25519.pub")"
SSH_USER=$user
ENV
echo "sshd.sh: sshd pid $(cat "$dir/sshd.pid") on port $port"
