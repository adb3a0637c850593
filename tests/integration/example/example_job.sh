#!/usr/bin/env bash
# The README's example job, as scripts/example.sh runs it (dslaunch on this node, data made
# by the project), must train: its last logged loss must fall below TARGET. It starts at
# ln 257 = 5.55 and ends near 0.9 after its 300 steps (2 ranks, ZeRO-3; 15-60 s on 2 cores).
# PRECISION (optional) replaces the [engine] precision: fp16 trains with the loss scaler,
# whose first steps overflow and are skipped; the run must then report skipped steps.
# DEVICE (optional) sets [engine] device (sim: the simulated GPU). With LOSSES_OUT=FILE
# the run's logged losses are written there; with LOSSES_AGAINST=FILE they must equal
# that file's (how CI holds the simulated GPU to the cpu's results).
# KEEP_LOGS=DIR (optional) keeps the run's logs there, for the monitor's tests.
# usage: example_job.sh DSLAUNCH DSRUN SOURCE_DIR TARGET [PRECISION] [DEVICE]
set -euo pipefail
dslaunch=$1 dsrun=$2 src=$3 target=$4 precision=${5:-} device=${6:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
logs=${KEEP_LOGS:-$tmp/logs}
rm -rf "$logs"

"$dsrun" run "$src/examples/gpt/make_data.lua" >/dev/null
# The job spec as shipped, run from its own folder, with a target added to its args.
sed -e "s|^args = \(.*\)$|args = \1 target_loss=$target|" \
    -e "s|^\[job\]$|[job]\nworkdir = $src/examples/gpt|" \
    "$src/examples/gpt/job.ini" >"$tmp/job.ini"
if [ -n "$precision" ]; then sed -i "s|^precision = .*$|precision = $precision|" "$tmp/job.ini"; fi
if [ -n "$device" ]; then sed -i "s|^\[engine\]$|[engine]\ndevice = $device|" "$tmp/job.ini"; fi
"$dslaunch" --log_dir "$logs" "$tmp/job.ini" >"$tmp/out" 2>&1 || {
  cat "$tmp/out"
  echo "FAIL: the example job did not reach loss $target"
  exit 1
}
grep -E "final loss [0-9.]+ < target" "$tmp/out"
# every logged step of rank 0, without the times (they differ run to run)
losses=$(grep -E '^\[[^]]*:0\] step ' "$tmp/out" | sed -E 's/^\[[^]]*\] //; s/ *\| *[0-9]+ tok\/s.*//' || true)
if [ -n "${LOSSES_OUT:-}" ]; then printf '%s\n' "$losses" >"$LOSSES_OUT"; fi
if [ -n "${LOSSES_AGAINST:-}" ]; then
  diff <(printf '%s\n' "$losses") "$LOSSES_AGAINST" >"$tmp/diff" ||
    { head -5 "$tmp/diff"; echo "FAIL: the losses differ from $LOSSES_AGAINST"; exit 1; }
  echo "losses equal $LOSSES_AGAINST ($(printf '%s\n' "$losses" | wc -l) lines)"
fi
# The log names the OpenBLAS core and why once (one node: its local rank 0's worker), as
# `dsrun --blas` does; the script itself leaves it to the worker under a launcher.
core=$("$dsrun" --blas | sed -n 's/^core //p')
blas=$(grep -aF "OpenBLAS" "$tmp/out" || true)
[[ $(wc -l <<<"$blas") == 1 && $blas == "["*":0] dsrun worker: OpenBLAS core $core" ]] ||
  { echo "FAIL: the log's OpenBLAS lines are not one worker line for core $core: $blas"; exit 1; }
echo "$blas"
if [ "$precision" = fp16 ]; then
  # Every rank logs the same scale and skip count (an overflow anywhere skips everywhere).
  last=$(grep -E "^\[[^]]*\] step +300/300" "$tmp/out" | sed -E 's/.*\| scale/scale/' | sort -u)
  echo "$last"
  [ "$(printf '%s\n' "$last" | wc -l)" -eq 1 ] || { echo "FAIL: ranks disagree: $last"; exit 1; }
  printf '%s\n' "$last" | grep -Eq "scale [0-9]+ \([1-9][0-9]* skipped\)" ||
    { echo "FAIL: no skipped steps reported"; exit 1; }
fi
