#!/usr/bin/env bash
# cases.sh CASE: one end-to-end checkpoint case (see CMakeLists.txt). Needs DSLAUNCH,
# DSRUN and WORK in the environment.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
scripts=$here/scripts
case=$1
job=$WORK/$case
ck=$job/ck
rm -rf "$job"
mkdir -p "$job"

fail() {
    echo "FAIL ($case): $*" >&2
    for f in "$job"/out*; do [[ -f $f ]] && { echo "--- $f"; tail -20 "$f"; } >&2; done
    exit 1
}

# save STEP WORLD [KILL_AT]: dslaunch runs WORLD local CPU ranks of save.lua; sets rc.
save() {
    local step=$1 world=$2 kill=${3:-}
    {
        printf '[job]\nname = ck%s\nscript = %s/save.lua\nargs = %s %s\ndsrun = %s\n' \
            "$step" "$scripts" "$ck" "$step" "$DSRUN"
        printf '[resources]\nnum_gpus = %s\ndevice = cpu\n' "$world"
        printf '[logs]\ndir = %s/logs\n' "$job"
        [[ -n $kill ]] && printf '[env]\nDS_CKPT_TEST_KILL_AT = %s\n' "$kill"
    } > "$job/job.ini"
    timeout -s KILL 60 "$DSLAUNCH" "$job/job.ini" > "$job/out.save$step" 2>&1
    rc=$?
}

# check STEP WORLD [PATH]: the checkpoint reads back at WORLD ranks with step STEP's data.
check() {
    "$DSRUN" run "$scripts/check.lua" "${3:-$ck}" "$1" "$2" > "$job/out.check" 2>&1 ||
        fail "step $1 does not read back at $2 ranks: $(tail -3 "$job/out.check")"
}

latest_is() {
    [[ $(cat "$ck/latest") == "$1" ]] || fail "latest is '$(cat "$ck/latest")', expected '$1'"
}

inspect_ok() {
    "$DSRUN" ckpt inspect "$1" > "$job/out.inspect" 2>&1 ||
        fail "dsrun ckpt inspect $1 failed: $(tail -3 "$job/out.inspect")"
    grep -q "all checksums verified" "$job/out.inspect" || fail "inspect did not verify"
}

case_reshard() {
    save 1 4
    [[ $rc == 0 ]] || fail "save at 4 ranks: exit $rc"
    latest_is step-1
    for w in 1 2 3 8; do check 1 "$w"; done
    save 2 3
    [[ $rc == 0 ]] || fail "save at 3 ranks: exit $rc"
    latest_is step-2
    for w in 1 4; do check 2 "$w"; done
    check 1 2 "$ck/step-1"
    inspect_ok "$ck"
}

# Rank 2 SIGKILLs itself after its first payload write; dslaunch stops the others.
case_rank_killed() {
    save 1 4
    [[ $rc == 0 ]] || fail "first save: exit $rc"
    save 2 4 2:1
    [[ $rc != 0 ]] || fail "the killed save exited 0"
    grep -q "rank 2 .*killed by signal 9" "$job/out.save2" || fail "dslaunch does not report rank 2 killed"
    [[ ! -e $ck/step-2/meta.json ]] || fail "the killed save left a meta.json"
    latest_is step-1
    check 1 2
    inspect_ok "$ck"
    save 2 4
    [[ $rc == 0 ]] || fail "the save after the crash: exit $rc"
    latest_is step-2
    check 2 1
}

# Rank 0 dies after meta.json, before latest: the new step is complete, latest unchanged.
case_rank0_killed_before_latest() {
    save 1 2
    [[ $rc == 0 ]] || fail "first save: exit $rc"
    save 2 2 0:before-latest
    [[ $rc != 0 ]] || fail "the killed save exited 0"
    latest_is step-1
    check 1 3
    check 2 3 "$ck/step-2"
    inspect_ok "$ck/step-2"
}

# A GPT with a bf16 stage, saved by model:save (no export table by hand), exports to the
# same bytes as gpt.save_safetensors writes: BF16 tensors for that stage, F32 for the rest.
case_export_gpt() {
    "$DSRUN" run "$scripts/export_gpt.lua" "$ck" > "$job/out.save" 2>&1 ||
        fail "export_gpt.lua: $(tail -3 "$job/out.save")"
    "$DSRUN" ckpt export "$ck" "$job/model.safetensors" > "$job/out.export" 2>&1 ||
        fail "dsrun ckpt export: $(tail -3 "$job/out.export")"
    cmp -s "$job/model.safetensors" "$ck/reference.safetensors" ||
        fail "the export differs from gpt.save_safetensors' file"
    header=$(head -c 8192 "$job/model.safetensors" | tr -d '\0' | tr -c '[:print:]' ' ')
    [[ $header == *'"dtype":"BF16"'* && $header == *'"dtype":"F32"'* ]] ||
        fail "the export does not mix BF16 and F32 tensors: $header"
    inspect_ok "$ck"
}

# model:resume: nil for no checkpoint, an exact continuation, an error for a damaged one.
case_resume() {
    "$DSRUN" run "$scripts/resume.lua" "$ck" > "$job/out.resume" 2>&1 ||
        fail "resume.lua: $(tail -5 "$job/out.resume")"
}

# model:load refuses a checkpoint of another model size (load_mismatch.lua exits non-zero
# when the load is accepted or the message is wrong).
case_load_mismatch() {
    "$DSRUN" run "$scripts/load_mismatch.lua" "$ck" > "$job/out.load" 2>&1 ||
        fail "load_mismatch.lua: $(tail -3 "$job/out.load")"
}

"case_$case"
echo "ok ($case)"
