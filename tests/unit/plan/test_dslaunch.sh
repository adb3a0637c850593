#!/usr/bin/env bash
# dslaunch end to end (no ranks started): --help, --version, usage errors (exit 2 with the
# usage line), --dry-run's exact JSON, and job spec / hostfile errors (exit 2, message
# with file:line, nothing left behind).
# usage: test_dslaunch.sh PATH/TO/dslaunch SOURCE_DIR
set -uo pipefail
DSLAUNCH=$1
SRC=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
# The plans below are exact: no variable of this environment that dslaunch passes on by
# default (docs/running.md#environment), no ~/.deepspeed_env of this machine.
for v in $(compgen -e); do
    case $v in NCCL_* | PYTHON* | UCX_* | CUDA_* | OMP_*) unset "$v" ;; esac
done
export HOME=$TMP/home
mkdir -p "$HOME"

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# run ARGS...: sets rc, out, err
run() {
    "$DSLAUNCH" "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    out=$(cat "$TMP/out")
    err=$(cat "$TMP/err")
}

expect_rc() { [[ $rc == "$1" ]] || fail "$2: exit $rc, expected $1 (stderr: $err)"; }
expect_in() { [[ $1 == *"$2"* ]] || fail "$3: '$2' not in: $1"; }

# --version, --help
run --version
expect_rc 0 "--version"
[[ $out =~ ^dslaunch\ [0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "--version printed '$out'"
run --help
expect_rc 0 "--help"
expect_in "$out" "usage: dslaunch [options] JOB.ini" "--help"
expect_in "$out" "--dry-run" "--help"

# usage errors: exit 2, the usage line on stderr
for args in "" "--bogus x.ini" "a.ini b.ini" "--num_nodes" "--num_gpus=x a.ini" "--tee 2-1 a.ini"; do
    # shellcheck disable=SC2086
    run $args
    expect_rc 2 "usage error '$args'"
    expect_in "$err" "usage: dslaunch [options] JOB.ini" "usage error '$args'"
done

# --dry-run: the exact plan (pretty JSON with blanks removed; no blanks in the values)
mkdir -p "$TMP/job"
cat >"$TMP/job/job.ini" <<'INI'
[job]
name = t
script = s.lua
args = --steps=2
dsrun = /opt/ds/dsrun
[resources]
hostfile = hosts
device = cuda
[env]
GREETING = hi
INI
cat >"$TMP/job/hosts" <<'HOSTS'
n0 slots=2
n1 slots=2   # comment
n2 slots=1 spare
HOSTS
run --dry-run --exclude n0:0 --master_port 2000 --tee 0 "$TMP/job/job.ini"
expect_rc 0 "--dry-run"
got=$(printf '%s' "$out" | tr -d ' \n')
# The engine's options (one DS_ENGINE_* per option of common/engine_opts.h, checked
# member by member in test_plan.c) are compared here by their presence and first member.
eng_of_rank=$(printf '%s' "$got" | grep -o '"DS_ENGINE_[A-Z0-9_]*":"[^"]*"' | head -n 40 | sort -u | wc -l)
[[ $eng_of_rank -ge 11 ]] || fail "--dry-run plan: $eng_of_rank DS_ENGINE_* variables"
got=$(printf '%s' "$got" | sed -E 's/"DS_ENGINE_ZERO":"0"(,"DS_ENGINE_[A-Z0-9_]*":"[^"]*")*/ENGINE/g')
eng='ENGINE'
env0='"MASTER_ADDR":"n0","MASTER_PORT":"2000","DS_JOB_ID":"t","DS_ATTEMPT":"0"'
torch0='"ROLE_NAME":"default","TORCHELASTIC_RESTART_COUNT":"0","TORCHELASTIC_MAX_RESTARTS":"0","TORCHELASTIC_RUN_ID":"t"'
want='{"job":{"name":"t","id":"t","attempt":0,"spec":"'$TMP'/job/job.ini","script":"s.lua","args":["--steps=2"],"workdir":"'$TMP'/job","dsrun":"/opt/ds/dsrun","device":"cuda","log_dir":"logs","tee":"0","launch":"ssh","hosts_from":"hostfile'$TMP'/job/hosts"},"world_size":3,"master_addr":"n0","master_port":2000,"gpus":true,"nodes":[{"host":"n0","node_rank":0,"slots":[1],"first_rank":0,"local":false},{"host":"n1","node_rank":1,"slots":[0,1],"first_rank":1,"local":false}],"ranks":[{"rank":0,"host":"n0","node_rank":0,"local_rank":0,"slot":1,"env":{"RANK":"0","WORLD_SIZE":"3","LOCAL_RANK":"0","LOCAL_WORLD_SIZE":"1","NODE_RANK":"0",'$env0',"GROUP_RANK":"0","GROUP_WORLD_SIZE":"2","ROLE_RANK":"0","ROLE_WORLD_SIZE":"3",'$torch0',"CUDA_VISIBLE_DEVICES":"1",'$eng',"GREETING":"hi"}},{"rank":1,"host":"n1","node_rank":1,"local_rank":0,"slot":0,"env":{"RANK":"1","WORLD_SIZE":"3","LOCAL_RANK":"0","LOCAL_WORLD_SIZE":"2","NODE_RANK":"1",'$env0',"GROUP_RANK":"1","GROUP_WORLD_SIZE":"2","ROLE_RANK":"1","ROLE_WORLD_SIZE":"3",'$torch0',"CUDA_VISIBLE_DEVICES":"0",'$eng',"GREETING":"hi"}},{"rank":2,"host":"n1","node_rank":1,"local_rank":1,"slot":1,"env":{"RANK":"2","WORLD_SIZE":"3","LOCAL_RANK":"1","LOCAL_WORLD_SIZE":"2","NODE_RANK":"1",'$env0',"GROUP_RANK":"1","GROUP_WORLD_SIZE":"2","ROLE_RANK":"2","ROLE_WORLD_SIZE":"3",'$torch0',"CUDA_VISIBLE_DEVICES":"1",'$eng',"GREETING":"hi"}}],"spares":[{"host":"n2","slots":[0]}]}'
[[ $got == "$want" ]] || fail "--dry-run plan:
got:  $got
want: $want"
[[ ! -e $TMP/job/logs ]] || fail "--dry-run created logs/"

# options after the job spec, --num_nodes on the command line, a relative --hostfile
(cd "$TMP/job" && "$DSLAUNCH" job.ini --dry-run -H hosts --num_nodes 1 >"$TMP/out" 2>"$TMP/err")
rc=$?
expect_rc 0 "--dry-run --num_nodes 1"
expect_in "$(tr -d ' \n' <"$TMP/out")" '"world_size":2,' "--num_nodes 1"

# the example job plans as it is
run --dry-run "$SRC/examples/hello/job.ini"
expect_rc 0 "examples/hello --dry-run"
expect_in "$out" '"script": "hello.lua"' "examples/hello"
# the default dsrun: build/runtime/dsrun beside build/launcher/dslaunch
dsrun_default=$(cd "$(dirname "$DSLAUNCH")/../runtime" 2>/dev/null && pwd -P)/dsrun
[[ -x $(dirname "$DSLAUNCH")/dsrun ]] && dsrun_default=$(cd "$(dirname "$DSLAUNCH")" && pwd -P)/dsrun
expect_in "$out" "\"dsrun\": \"$dsrun_default\"" "default dsrun"
run --dry-run -H "$SRC/hostfiles/example" --num_gpus 1 "$SRC/examples/hello/job.ini"
expect_rc 0 "hostfiles/example --dry-run"
expect_in "$(tr -d ' \n' <"$TMP/out")" '"world_size":3,' "hostfiles/example"

# job spec errors: exit 2, file:line and key in the message, nothing left behind
printf '[job]\nname = t\nscript = s.lua\n[engine]\nzero_stage = 5\n' >"$TMP/job/bad.ini"
before=$(ls -A "$TMP/job")
run "$TMP/job/bad.ini"
expect_rc 2 "bad spec"
expect_in "$err" "$TMP/job/bad.ini:5: [engine] zero_stage: 5 is out of range; expected an integer in 0..3" "bad spec"
[[ $(ls -A "$TMP/job") == "$before" ]] || fail "bad spec left files behind"
printf '[job]\nname = t\nscript = s.lua\n[jbo]\n' >"$TMP/job/bad.ini"
run --dry-run "$TMP/job/bad.ini"
expect_rc 2 "unknown section"
expect_in "$err" "bad.ini:4: [jbo]: unknown section" "unknown section"
run --dry-run "$TMP/job/missing.ini"
expect_rc 2 "missing spec"
expect_in "$err" "missing.ini: cannot open the job spec" "missing spec"

# hostfile and filter errors: exit 2 with file:line or the filter named
printf 'n0 slots=4abc\n' >"$TMP/job/badhosts"
before=$(ls -A "$TMP/job")
run --dry-run -H "$TMP/job/badhosts" "$TMP/job/job.ini"
expect_rc 2 "bad hostfile"
expect_in "$err" "badhosts:1: 'slots=4abc': trailing text after the slot count" "bad hostfile"
run --dry-run --include jeff "$TMP/job/job.ini"
expect_rc 2 "unknown host"
expect_in "$err" "--include: host 'jeff' is not in the hostfile" "unknown host"
run --dry-run --num_nodes 3 "$TMP/job/job.ini"
expect_rc 2 "num_nodes"
expect_in "$err" "--num_nodes 3: only 2 nodes available" "num_nodes"
[[ $(ls -A "$TMP/job") == "$before" ]] || fail "errors left files behind"

# a hostfile and a program are enough: no job spec; everything after the program is its own
(cd "$TMP/job" && "$DSLAUNCH" --dry-run -H hosts --set engine.seed=7 train.py --lr 3e-4 --dry-run >"$TMP/out" 2>"$TMP/err")
rc=$?
expect_rc 0 "--dry-run PROGRAM"
got=$(tr -d ' \n' <"$TMP/out")
expect_in "$got" '"job":{"name":"train","id":"train","attempt":0,"spec":null,"script":"train.py","args":["--lr","3e-4","--dry-run"],"workdir":"'$TMP'/job",' "--dry-run PROGRAM"
expect_in "$got" '"world_size":4,' "--dry-run PROGRAM"
expect_in "$got" '"DS_ENGINE_SEED":"7"' "--dry-run PROGRAM --set"
# a job spec's arguments after `--`; --set errors exit 2 naming the --set
run --dry-run "$TMP/job/job.ini" -- steps=5
expect_rc 0 "JOB.ini -- ARGS"
expect_in "$(tr -d ' \n' <"$TMP/out")" '"args":["steps=5"]' "JOB.ini -- ARGS"
run --dry-run "$TMP/job/job.ini" steps=5
expect_rc 2 "JOB.ini ARGS without --"
expect_in "$err" "with a job spec, the program's arguments come after \`--\`" "JOB.ini ARGS without --"
run --dry-run --set engine.zero=5 "$TMP/job/job.ini"
expect_rc 2 "--set unknown key"
expect_in "$err" "dslaunch: --set engine.zero=5: [engine] zero: unknown key (expected one of: zero_stage" "--set unknown key"

# every rank's environment: DeepSpeed's prefixes from here, .deepspeed_env / .dslaunch_env
# in home and workdir, --export, [env]; a later one wins
printf 'FROM_HOME=h\nSHARED=home\n' >"$HOME/.deepspeed_env"
printf '# comment\n\nexport SHARED="workdir"\nFROM_WD=w\n' >"$TMP/job/.dslaunch_env"
(cd "$TMP/job" && NCCL_DEBUG=INFO OMP_NUM_THREADS=3 MINE=m CUDA_VISIBLE_DEVICES=7 GREETING=env \
    "$DSLAUNCH" --dry-run --export MINE,GREETING --export X=1 job.ini >"$TMP/out" 2>"$TMP/err")
rc=$?
expect_rc 0 "environment sources"
got=$(tr -d ' \n' <"$TMP/out")
expect_in "$got" '"CUDA_VISIBLE_DEVICES":"1","DS_ENGINE_ZERO"' "CUDA_VISIBLE_DEVICES stays dslaunch's"
expect_in "$got" '"FROM_HOME":"h","SHARED":"workdir","FROM_WD":"w","MINE":"m","GREETING":"hi","X":"1"}' "environment sources"
expect_in "$got" '"NCCL_DEBUG":"INFO",' "NCCL_ prefix passed on"
expect_in "$got" '"OMP_NUM_THREADS":"3",' "OMP_ prefix passed on"
printf 'NOT A PAIR\n' >"$TMP/job/.dslaunch_env"
run --dry-run "$TMP/job/job.ini"
expect_rc 2 "bad .dslaunch_env"
expect_in "$err" "$TMP/job/.dslaunch_env:1: expected KEY=VALUE" "bad .dslaunch_env"
rm -f "$TMP/job/.dslaunch_env" "$HOME/.deepspeed_env"
run --dry-run --export NOT_SET_ANYWHERE "$TMP/job/job.ini"
expect_rc 2 "--export of an unset variable"
expect_in "$err" "--export NOT_SET_ANYWHERE: NOT_SET_ANYWHERE is not set in this environment" "--export unset"
run --dry-run --export RANK=3 "$TMP/job/job.ini"
expect_rc 2 "--export RANK"
expect_in "$err" "--export RANK=3: RANK is set by dslaunch" "--export RANK"

# no hostfile, CPU: a command-line --include/--exclude selects among this node's slots,
# which the spec's num_gpus (or the slots the filter names) size
printf '[job]\nname = t\nscript = s.lua\n[resources]\nnum_gpus = 4\ndevice = cpu\n' >"$TMP/job/local.ini"
run --dry-run --exclude localhost:0 "$TMP/job/local.ini"
expect_rc 0 "--exclude with the spec's num_gpus"
expect_in "$(tr -d ' \n' <"$TMP/out")" '"host":"localhost","node_rank":0,"slots":[1,2,3]' "--exclude localhost:0"
run --dry-run --include localhost:1 --set resources.device=cpu "$TMP/job/local.ini"
expect_rc 0 "--include localhost:1"
expect_in "$(tr -d ' \n' <"$TMP/out")" '"slots":[1],' "--include localhost:1"
(cd "$TMP/job" && "$DSLAUNCH" --dry-run --set resources.device=cpu --include localhost:0,5 s.lua >"$TMP/out" 2>"$TMP/err")
rc=$?
expect_rc 0 "--include localhost:0,5 without a spec"
expect_in "$(tr -d ' \n' <"$TMP/out")" '"slots":[0,5],' "--include localhost:0,5"

# a workdir that does not exist is refused before anything starts, naming it
run --dry-run --set job.workdir=/nonexistent/wd "$TMP/job/job.ini"
expect_rc 2 "missing workdir"
expect_in "$err" "[job] workdir /nonexistent/wd: No such file or directory" "missing workdir"

if ((failures)); then
    echo "$failures failure(s)"
    exit 1
fi
echo "dslaunch: all checks passed"
