#!/usr/bin/env bash
# blas_choice.sh DSRUN SHIM WORKDIR: dsrun's own OpenBLAS core choice end to end, on any
# CPU with AVX: SHIM (blas_shim.c, preloaded) plays an OpenBLAS that picks Prescott, and
# logs every program start. With no OPENBLAS_CORETYPE, dsrun sets the CPU's best core in
# one restart (together with OMP_WAIT_POLICY), its GEMM check passes, and ds.blas() and the
# programs it starts say so; a core whose GEMM is wrong falls back with one warning and one
# more restart, never a loop; the user's OPENBLAS_CORETYPE is never replaced.
set -euo pipefail
dsrun=$1 shim=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }

cpu=$(env -u OPENBLAS_CORETYPE -u DS_BLAS_CORE "$dsrun" --blas | sed -n 's/^cpu \([A-Za-z0-9_-]*\) .*/\1/p')
[[ -n $cpu ]] || fail "no cpu line in dsrun --blas"
if [[ $cpu == - ]]; then echo "blas choice: ok (this CPU has no AVX: dsrun never chooses a core)"; exit 0; fi

n=0
shimmed() { # shimmed [env options and assignments...] -- CMD...: sets out, err, starts
    local unset=() set=() log=$work/starts.$((n += 1))
    while [[ $1 != -- ]]; do
        if [[ $1 == -u ]]; then unset+=("$1" "$2"); shift; else set+=("$1"); fi
        shift
    done
    shift
    out=$(timeout 20 env -u OPENBLAS_CORETYPE -u DS_BLAS_CORE "${unset[@]}" BLAS_SHIM_PICK=Prescott \
          "${set[@]}" LD_PRELOAD="$shim" BLAS_SHIM_LOG="$log" "$@" 2>"$work/err") ||
        fail "$* exited $? (stderr: $(cat "$work/err"))"
    err=$(cat "$work/err")
    starts=$(tr '\n' ' ' <"$log")
}
why="chosen by dsrun: OpenBLAS picked Prescott, below this CPU's $cpu"
chosen="core $cpu ($why)"

# One restart sets both OMP_WAIT_POLICY and the core; with a policy set, the core alone.
for policy in -u\ OMP_WAIT_POLICY OMP_WAIT_POLICY=PASSIVE; do
    # shellcheck disable=SC2086
    shimmed $policy -- "$dsrun" --blas
    [[ $(sed -n 2p <<<"$out") == "$chosen" ]] || fail "$policy: $out"
    [[ $starts == "start - start $cpu " ]] || fail "$policy: starts $starts"
    [[ -z $err ]] || fail "$policy: stderr $err"
done

# A script sees the same, and a dsrun it starts inherits the choice without a restart.
cat >"$work/blas.lua" <<'LUA'
local b = require('ds').blas()
print(b.core .. '|' .. b.reason .. '|' .. b.openblas_core .. '|' .. b.cpu_core .. '|' .. b.why)
local child = io.popen(arg[1] .. ' --blas'):read('a')
print(child:match('\ncore [^\n]*'):sub(2))
LUA
shimmed -- "$dsrun" run "$work/blas.lua" "$dsrun"
[[ $(sed -n 1p <<<"$out") == "$cpu|dsrun|Prescott|$cpu|$why" ]] || fail "ds.blas(): $out"
[[ $(sed -n 2p <<<"$out") == "$chosen" ]] || fail "the child's report: $out"
# dsrun, its restart, the shell of io.popen, the child dsrun (no restart of its own)
[[ $starts == "start - start $cpu start $cpu start $cpu " ]] || fail "script and child: starts $starts"

# The core OpenBLAS picked is already the CPU's best: nothing to do, no restart.
shimmed OMP_WAIT_POLICY=PASSIVE BLAS_SHIM_PICK="$cpu" -- "$dsrun" --blas
[[ $(sed -n 2p <<<"$out") == "core $cpu (OpenBLAS's choice for this CPU)" && $starts == "start - " ]] ||
    fail "best already: $out, starts $starts"

# The user's OPENBLAS_CORETYPE wins, even below the CPU's best.
shimmed OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=Prescott -- "$dsrun" --blas
[[ $(sed -n 2p <<<"$out") == "core Prescott (forced by the user's OPENBLAS_CORETYPE)" &&
   $starts == "start Prescott " ]] || fail "user's core: $out, starts $starts"

# The chosen core's sgemm is wrong at an edge: one warning naming the difference, one more
# restart with OpenBLAS's own choice, and that is final.
shimmed -u OMP_WAIT_POLICY BLAS_SHIM_BREAK=1 -- "$dsrun" --blas
[[ $(sed -n 2p <<<"$out") == "core Prescott (OpenBLAS's choice: dsrun's $cpu failed its check at start)" ]] ||
    fail "fallback: $out"
[[ $starts == "start - start $cpu start - " ]] || fail "fallback: starts $starts"
[[ $(wc -l <<<"$err") == 1 && $err == "dsrun: warning: OpenBLAS core $cpu, which dsrun chose because OpenBLAS picked Prescott, failed its check at start: sgemm M=7 N=13 "* ]] ||
    fail "fallback: stderr $err"
echo "blas choice: ok (Prescott -> $cpu)"
