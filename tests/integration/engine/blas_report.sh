#!/usr/bin/env bash
# blas_report.sh DSRUN WORKDIR: `dsrun --blas` names the OpenBLAS core the GEMMs run and
# whether OPENBLAS_CORETYPE forced it, and ds.blas() in a script names the same core.
# The environment is used as it is: some sites pin OPENBLAS_CORETYPE, and a test must not
# change what the GEMMs run.
set -euo pipefail
dsrun=$1 work=$2
rm -rf "$work" && mkdir -p "$work"

out=$("$dsrun" --blas)
grep -q '^OpenBLAS [0-9]' <<<"$out" || { echo "no OpenBLAS build line in: $out"; exit 1; }
core=$(sed -n 's/^core \([A-Za-z0-9_]*\) (.*)$/\1/p' <<<"$out")
[[ -n $core ]] || { echo "no core line in: $out"; exit 1; }
if [[ -z ${OPENBLAS_CORETYPE:-} ]]; then
    grep -q "^core $core (OpenBLAS's choice for this CPU)$" <<<"$out"
elif [[ ${core,,} == "${OPENBLAS_CORETYPE,,}" ]]; then
    grep -q "^core $core (forced by OPENBLAS_CORETYPE)$" <<<"$out"
else
    grep -q "did not take OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE)$" <<<"$out"
fi

cat >"$work/blas.lua" <<'LUA'
local ds = require 'ds'
local b = ds.blas()
assert(type(b.config) == 'string' and b.config:match('^OpenBLAS'), 'config')
assert(b.coretype == os.getenv('OPENBLAS_CORETYPE'), 'coretype')
print('lua core ' .. b.core)
LUA
[[ $("$dsrun" run "$work/blas.lua") == "lua core $core" ]]

# An option that takes nothing refuses what follows it instead of ignoring it.
rc=0
err=$("$dsrun" --blas extra 2>&1 >/dev/null) || rc=$?
[[ $rc -eq 2 && $err == *"--blas takes no arguments (got 'extra')"* ]] ||
    { echo "dsrun --blas extra: status $rc, stderr: $err"; exit 1; }
echo "blas report: ok ($core)"
