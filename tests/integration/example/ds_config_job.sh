#!/usr/bin/env bash
# The example model under a DeepSpeed config written as DeepSpeed's documentation writes
# them (examples/gpt/ds_zero2_fp16.json, ds_zero3_bf16.json), through `--deepspeed_config`:
# the log must show the settings the config names applied (dslaunch's mapping, and each
# rank's ZeRO stage, precision, loss scaler, micro batch, accumulation and optimizer), no
# script value overriding them, and the job must train (60 steps, 2 ranks; ~10 s each).
# usage: ds_config_job.sh DSLAUNCH DSRUN SOURCE_DIR CONFIG
set -euo pipefail
dslaunch=$1 dsrun=$2 src=$3 config=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$dsrun" run "$src/examples/gpt/make_data.lua" >/dev/null
# The example job with no CONFIG.lua: every training setting is the job's, i.e. the config's.
sed -e "s|^args = .*$|args = data=data/train.tok model.vocab=257 model.context=64 model.d=96 steps=60 log_every=10|" \
    -e "s|^\[job\]$|[job]\nworkdir = $src/examples/gpt|" \
    -e "/^\[engine\]$/,/^\[/{/^[a-z_]* = /d}" \
    "$src/examples/gpt/job.ini" >"$tmp/job.ini"
"$dslaunch" --log_dir "$tmp/logs" --deepspeed_config "$src/examples/gpt/$config" "$tmp/job.ini" >"$tmp/out" 2>&1 ||
  { cat "$tmp/out"; fail "the job failed"; }

expect() { grep -qF -- "$1" "$tmp/out" || { cat "$tmp/out"; fail "not in the log: $1"; }; }
# each rank logs the same settings: check rank 0's and rank 1's
expect_ranks() {
  for r in 0 1; do
    grep -F "[localhost:$r] " "$tmp/out" | grep -qF -- "$1" || { cat "$tmp/out"; fail "not in rank $r's log: $1"; }
  done
}
case $config in
ds_zero2_fp16.json)
  expect "zero_optimization.stage -> zero_stage = 2"
  expect "fp16.enabled -> precision = fp16"
  expect "train_batch_size = 32 -> micro_batch = 8, grad_accum = 2 (x 2 ranks)"
  expect "zero_optimization.reduce_bucket_size -> reduce_bucket_size = 500000000"
  expect "warning: $src/examples/gpt/ds_zero2_fp16.json: 5 keys not applied:"
  expect "  zero_optimization.overlap_comm: "
  expect_ranks "  stage blocks       223680 params  zero 2  checkpoint none  precision fp16"
  expect_ranks "batch 8 x 64, accumulation 2;"
  expect_ranks "loss scaler: initial scale 4096, window 100, hysteresis 2, min 1"
  expect_ranks "adamw: lr 0.003, betas 0.9 0.95, eps 1e-08, weight decay 0.1; schedule job warmup; clip 1"
  # the warmup is DeepSpeed's linear one: step 10 is iteration 9 of 10
  expect "[localhost:0] step    10/60 | loss"
  grep -E '^\[localhost:0\] step    10/60 .*\| lr 2\.70e-03 \|' "$tmp/out" >/dev/null || fail "step 10's lr is not 2.70e-03"
  grep -E '^\[localhost:0\] step    60/60 .*\| scale [0-9]+ \(' "$tmp/out" >/dev/null || fail "no loss scale logged" ;;
ds_zero3_bf16.json)
  expect "zero_optimization.stage -> zero_stage = 3"
  expect "bf16.enabled -> precision = bf16"
  expect "train_micro_batch_size_per_gpu -> micro_batch = 8"
  expect "gradient_accumulation_steps -> grad_accum = 2"
  expect "train_batch_size = auto -> 32 (micro_batch 8 x grad_accum 2 x 2 ranks)"
  expect "zero_optimization.reduce_bucket_size = auto -> reduce_bucket_size = 1048576"
  expect "scheduler.type -> lr_schedule = warmup_cosine"
  expect_ranks "  stage blocks       223680 params  zero 3  checkpoint none  precision bf16"
  expect_ranks "batch 8 x 64, accumulation 2;"
  expect_ranks "schedule job warmup_cosine; clip 1"
  # the cosine ends at cos_min_ratio x lr
  grep -E '^\[localhost:0\] step    60/60 .*\| lr 9\.00e-05 \|' "$tmp/out" >/dev/null || fail "step 60's lr is not 9.00e-05" ;;
*) fail "no expectations for $config" ;;
esac
if grep -F "the script's" "$tmp/out"; then fail "a script value overrode the config"; fi
# it trains: from ln 257 = 5.55 to below 3 in 60 steps (it reaches ~2.0-2.3)
first=$(grep -E '^\[localhost:0\] step +10/60' "$tmp/out" | sed -E 's/.*\| loss ([0-9.]+) .*/\1/')
last=$(grep -E '^\[localhost:0\] step +60/60' "$tmp/out" | sed -E 's/.*\| loss ([0-9.]+) .*/\1/')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a && b < 3.0) }' || fail "loss $first -> $last: did not train"
grep -q "all 2 ranks exited 0" "$tmp/out" || fail "the job did not end cleanly"
echo "ds config $config: applied and trained (loss $first -> $last)"
