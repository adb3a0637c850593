#!/usr/bin/env bash
# The README's example job, as scripts/example.sh runs it (dslaunch on this node, data made
# by the project), must train: its last logged loss must fall below TARGET. It starts at
# ln 257 = 5.55 and ends near 0.9 after its 300 steps (2 ranks, ZeRO-3; 30-60 s on 2 cores).
# usage: example_job.sh DSLAUNCH DSRUN SOURCE_DIR TARGET
set -euo pipefail
dslaunch=$1 dsrun=$2 src=$3 target=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$dsrun" run "$src/examples/gpt/make_data.lua" >/dev/null
# The job spec as shipped, run from its own folder, with a target added to its args.
sed -e "s|^args = \(.*\)$|args = \1 target_loss=$target|" \
    -e "s|^\[job\]$|[job]\nworkdir = $src/examples/gpt|" \
    "$src/examples/gpt/job.ini" >"$tmp/job.ini"
"$dslaunch" --log_dir "$tmp/logs" "$tmp/job.ini" >"$tmp/out" 2>&1 || {
  cat "$tmp/out"
  echo "FAIL: the example job did not reach loss $target"
  exit 1
}
grep -E "final loss [0-9.]+ < target" "$tmp/out"
