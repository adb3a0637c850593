#!/bin/sh
# Each scripts/bad_*.lua must make `dsrun run` exit with status 1 (a Lua error, not a
# crash or a signal), and stderr must name the script's line marked "-- error here" and
# hold the message after "-- expect: " on the script's first line.
# usage: script_errors.sh DSRUN SCRIPTS_DIR
dsrun=$1 dir=$2 fail=0
for f in "$dir"/bad_*.lua; do
    line=$(grep -n -- '-- error here' "$f" | cut -d: -f1)
    expect=$(sed -n '1s/^-- expect: //p' "$f")
    err=$("$dsrun" run "$f" 2>&1 >/dev/null)
    rc=$?
    name=$(basename "$f")
    if [ "$rc" -ne 1 ]; then echo "FAIL $name: exit status $rc, expected 1"; fail=1; fi
    case "$err" in
    *"$name:$line: "*) ;;
    *) echo "FAIL $name: message does not name $name:$line"; fail=1 ;;
    esac
    case "$err" in
    *"$expect"*) ;;
    *) echo "FAIL $name: message lacks: $expect"; fail=1 ;;
    esac
    case "$err" in
    *"stack traceback"*) ;;
    *) echo "FAIL $name: no traceback"; fail=1 ;;
    esac
    [ $fail -eq 0 ] && echo "ok $name: $(echo "$err" | head -1)"
done
exit $fail
