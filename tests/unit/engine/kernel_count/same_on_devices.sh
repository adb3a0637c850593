#!/bin/sh
# same_on_devices.sh DSRUN SCRIPT: runs SCRIPT (counts.lua) on cpu and on sim and requires
# the same counts, line for line: the same kernels called with the same sizes, the same
# memsets and device copies, whichever device runs them.
set -eu
dsrun=$1 script=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for dev in cpu sim; do
    DS_ENGINE_DEVICE=$dev "$dsrun" run "$script" >"$dir/$dev"
    grep -q '^counted$' "$dir/$dev" || { echo "FAIL: $dev did not finish"; exit 1; }
done
if ! diff "$dir/cpu" "$dir/sim"; then echo "FAIL: counts differ between cpu and sim"; exit 1; fi
echo "kernel counts: $(grep -c ' calls=' "$dir/cpu") lines, the same on cpu and sim"
