#!/usr/bin/env bash
# ZeRO-3 over dslaunch: a 2-node x 2-rank job (nodes 127.0.0.2 and 127.0.0.3 through a
# private sshd on loopback) trains the tiny GPT of zero_gpt.lua for 20 steps with every
# stage at ZeRO-3; every step's loss and global grad norm must match the single-rank run
# with ZeRO off within |a - b| <= 1e-5 + 1.3e-6 |b|. Needs DSLAUNCH and DSRUN.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/zero-launch-XXXXXX)
sshd="$work/sshd"
cleanup() { "$here/../launch/sshd.sh" stop "$sshd" >/dev/null 2>&1; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$work"/out "$work"/err; do [[ -f $f ]] && tail -n 30 "$f" >&2; done; exit 1; }

"$here/../launch/sshd.sh" start "$sshd" 2 || fail "sshd did not start"
. "$sshd/env"
cp "$here/zero_gpt.lua" "$work/"

args="optim=adamw lr=0.001 steps=20"
"$DSRUN" run "$work/zero_gpt.lua" out="$work/ref.txt" zero=0 $args > "$work/ref.log" 2>&1 || fail "the single-rank run failed"

printf '127.0.0.2 slots=2\n127.0.0.3 slots=2\n' > "$work/hosts"
{
    printf '[job]\nname = zero3-%s\nscript = zero_gpt.lua\ndsrun = %s\n' "$$" "$DSRUN"
    printf 'args = "out=%s/w4.txt" zero=3 %s\n' "$work" "$args"
    printf '[resources]\nhostfile = hosts\n'
    printf '[ssh]\nport = %s\nidentity = %s\nknown_hosts = %s\nconnect_timeout = 5\n' \
        "$SSHD_PORT" "$SSH_IDENTITY" "$SSH_KNOWN_HOSTS"
} > "$work/job.ini"
timeout -s KILL 90 "$DSLAUNCH" "$work/job.ini" > "$work/out" 2> "$work/err" || fail "dslaunch exited $?"
[[ -s $work/w4.txt ]] || fail "rank 0 wrote no results"

# loss and gnorm lines of both runs, side by side.
paste <(grep -E '^(loss|gnorm) ' "$work/ref.txt") <(grep -E '^(loss|gnorm) ' "$work/w4.txt") | awk '
    { if ($1 != $4 || $2 != $5) { print "line " NR ": " $1 " " $2 " vs " $4 " " $5; bad = 1; next }
      d = $6 - $3; if (d < 0) d = -d; a = $3 < 0 ? -$3 : $3
      if (d > maxd[$1]) maxd[$1] = d
      if (d > 1e-5 + 1.3e-6 * a) { print $1 " step " $2 ": " $6 ", single rank " $3; bad = 1 }
      n++ }
    END { printf "2 nodes x 2 ranks, ZeRO-3, %d values: loss max abs diff %.2e, grad norm %.2e\n",
                 n, maxd["loss"], maxd["gnorm"]
          if (n != 40) { print "expected 40 values"; bad = 1 }
          exit bad }' || fail "losses differ from the single-rank run"
echo "PASS"
