#!/bin/sh
# Runs api_misuse.lua in a fresh directory (the sweep's path arguments create files) and
# requires it to finish: exit status 0 and its closing "swept N calls over M objects"
# line. A crash, an abort or a sanitizer report ends the run before that line.
# usage: run_sweep.sh DSRUN SCRIPT
dsrun=$1 script=$2
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
out=$(cd "$dir" && "$dsrun" run "$script" 2>&1)
rc=$?
printf '%s\n' "$out" | tail -20
if [ "$rc" -ne 0 ]; then echo "FAIL: dsrun exited with status $rc"; exit 1; fi
case "$out" in
*"swept "*" calls over "*" objects"*) echo "ok" ;;
*) echo "FAIL: the sweep did not reach its end"; exit 1 ;;
esac
