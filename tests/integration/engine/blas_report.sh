#!/usr/bin/env bash
# blas_report.sh DSRUN WORKDIR: `dsrun --blas` names the OpenBLAS core the GEMMs run and
# why (OpenBLAS's choice, the user's OPENBLAS_CORETYPE, dsrun's choice when OpenBLAS
# picked a core below the CPU's, or OpenBLAS's after dsrun's failed its check), and
# ds.blas() in a script says the same. Run with the environment as it is (some sites pin
# OPENBLAS_CORETYPE) and without OPENBLAS_CORETYPE. dsrun's own choice and its fallback
# are reached on any CPU through DS_BLAS_CORE, the mark dsrun leaves for the program it
# restarts (kernels/cpu/cpu_env.c).
set -euo pipefail
dsrun=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }

# The three lines: OpenBLAS's build, "core NAME (WHY)", "cpu BEST (flags: ...)".
report() { # report [env args...]: runs dsrun --blas; sets out, err, core, why, cpu
    out=$(timeout 20 env "$@" "$dsrun" --blas 2>"$work/err") || fail "dsrun --blas ($*) exited $?"
    err=$(cat "$work/err")
    grep -q '^OpenBLAS [0-9]' <<<"$out" || fail "no OpenBLAS build line in: $out"
    core=$(sed -n 's/^core \([A-Za-z0-9_]*\) (\(.*\))$/\1/p' <<<"$out")
    why=$(sed -n 's/^core \([A-Za-z0-9_]*\) (\(.*\))$/\2/p' <<<"$out")
    cpu=$(sed -n 's/^cpu \([A-Za-z0-9_-]*\) (flags: [a-z0-9_ -]*)$/\1/p' <<<"$out")
    [[ -n $core && -n $why && -n $cpu && $(wc -l <<<"$out") == 3 ]] || fail "not three lines: $out"
}

# ds.blas() in a script run with the same environment names the same core and reason.
lua_agrees() { # lua_agrees REASON [env args...]
    local reason=$1; shift
    local got
    got=$(timeout 20 env "$@" "$dsrun" run "$work/blas.lua" 2>/dev/null) || fail "ds.blas() script failed"
    [[ $got == "$core|$why|$reason" ]] || fail "ds.blas() says '$got', dsrun --blas '$core|$why|$reason'"
}
cat >"$work/blas.lua" <<'LUA'
local ds = require 'ds'
local b = ds.blas()
assert(type(b.config) == 'string' and b.config:match('^OpenBLAS'), 'config')
assert(b.coretype == os.getenv('OPENBLAS_CORETYPE'), 'coretype')
assert(b.forced == (b.reason == 'user' or b.reason == 'dsrun'), 'forced')
print(b.core .. '|' .. b.why .. '|' .. b.reason)
LUA

# OpenBLAS's own pick on this CPU: a fallback mark stops dsrun from choosing.
report -u OPENBLAS_CORETYPE DS_BLAS_CORE='fallback - -'
own=$core

# No OPENBLAS_CORETYPE: OpenBLAS's choice, or the CPU's best core when OpenBLAS's is below.
report -u OPENBLAS_CORETYPE -u DS_BLAS_CORE
if [[ $core == "$own" ]]; then
    [[ $why == "OpenBLAS's choice for this CPU" ]] || fail "unset: $out"
    lua_agrees openblas -u OPENBLAS_CORETYPE -u DS_BLAS_CORE
else
    [[ $core == "$cpu" && $why == "chosen by dsrun: OpenBLAS picked $own, below this CPU's $cpu" ]] ||
        fail "unset, OpenBLAS's own $own: $out"
    lua_agrees dsrun -u OPENBLAS_CORETYPE -u DS_BLAS_CORE
fi
[[ -z $err ]] || fail "stderr: $err"

# The environment as it is: a site's OPENBLAS_CORETYPE wins when OpenBLAS takes it.
report
if [[ -n ${OPENBLAS_CORETYPE:-} && ${core,,} == "${OPENBLAS_CORETYPE,,}" ]]; then
    [[ $why == "forced by the user's OPENBLAS_CORETYPE" ]] || fail "site's core: $out"
    lua_agrees user
elif [[ -n ${OPENBLAS_CORETYPE:-} ]]; then
    [[ $why == "OpenBLAS's choice: it did not take OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE" ]] || fail "$out"
    lua_agrees ignored
fi

# The user's core wins even when it is below the CPU's best, and an unknown name is left
# to OpenBLAS, which says which core it runs instead (0.3.21 has no SapphireRapids; its
# fallback for a name it does not know need not be its pick without one: on a Zen 5 it
# picks Prescott unasked and falls back to Cooperlake).
report -u DS_BLAS_CORE OPENBLAS_CORETYPE=Prescott
[[ $core == Prescott && $why == "forced by the user's OPENBLAS_CORETYPE" ]] || fail "Prescott: $out"
lua_agrees user -u DS_BLAS_CORE OPENBLAS_CORETYPE=Prescott
report -u DS_BLAS_CORE OPENBLAS_CORETYPE=NoSuchCore
[[ $core != NoSuchCore && $why == "OpenBLAS's choice: it did not take OPENBLAS_CORETYPE=NoSuchCore" ]] ||
    fail "NoSuchCore: $out"
# A stale mark (the user set another core since) does not turn the user's core into dsrun's.
report OPENBLAS_CORETYPE=Prescott DS_BLAS_CORE="dsrun Haswell Prescott"
[[ $why == "forced by the user's OPENBLAS_CORETYPE" ]] || fail "stale mark: $out"

# dsrun's choice, as the restarted program sees it: the core passes its GEMM check and is
# reported with what OpenBLAS had picked.
if [[ $cpu != - ]]; then
    report OPENBLAS_CORETYPE="$cpu" DS_BLAS_CORE="dsrun $cpu Prescott"
    [[ $core == "$cpu" && $why == "chosen by dsrun: OpenBLAS picked Prescott, below this CPU's $cpu" ]] ||
        fail "dsrun's $cpu: $out"
    [[ -z $err ]] || fail "dsrun's $cpu, stderr: $err"
    lua_agrees dsrun OPENBLAS_CORETYPE="$cpu" DS_BLAS_CORE="dsrun $cpu Prescott"
fi

# A chosen core that fails its check (here: one dsrun never sets, so not vouched for)
# falls back to OpenBLAS's own choice with one warning, restarting once: no loop.
report OPENBLAS_CORETYPE=Prescott DS_BLAS_CORE="dsrun Prescott Nehalem"
[[ $core == "$own" && $why == "OpenBLAS's choice: dsrun's Prescott failed its check at start" ]] ||
    fail "fallback: $out"
[[ $(grep -c "warning: OpenBLAS core Prescott, which dsrun chose because OpenBLAS picked Nehalem, failed its check at start" <<<"$err") == 1 &&
   $(wc -l <<<"$err") == 1 ]] || fail "fallback, stderr: $err"

# An option that takes nothing refuses what follows it instead of ignoring it.
rc=0
err=$("$dsrun" --blas extra 2>&1 >/dev/null) || rc=$?
[[ $rc -eq 2 && $err == *"--blas takes no arguments (got 'extra')"* ]] ||
    { echo "dsrun --blas extra: status $rc, stderr: $err"; exit 1; }
echo "blas report: ok ($own is OpenBLAS's own choice here; the CPU's best is $cpu)"
