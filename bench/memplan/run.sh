#!/usr/bin/env bash
# The planner beside measurement: GPT-2 124M (T = 256, micro-batch B = 4) on 2 ranks
# (real processes, Gloo on loopback), each technique alone and the combinations that
# matter, 3 steps each; per configuration the measured peak per category on rank 0 next
# to the planner's prediction, the fastest step's time as a ratio to the baseline's
# measured in the same run, and one JSON line (also in OUT, default /tmp/memplan_bench.jsonl).
#   bench/memplan/run.sh [BUILD_DIR] [size=gpt2] [batch=4] [steps=3] [world=2]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
shift || true
size=gpt2 batch=4 steps=3 world=2
for a in "$@"; do eval "${a%%=*}='${a#*=}'"; done
driver=$build/tests/integration/memplan/memplan_grid
out=${OUT:-/tmp/memplan_bench.jsonl}
: > "$out"
configs=(
  "baseline 0 none fp32" "bf16 0 none bf16" "checkpoint 0 full fp32" "zero1 1 none fp32"
  "zero2 2 none fp32" "zero3 3 none fp32" "zero2+ckpt+bf16 2 full bf16" "zero3+ckpt+bf16 3 full bf16"
)
for c in "${configs[@]}"; do
  read -r name z ck p <<< "$c"
  "$driver" "$root/tests/integration/memplan/memplan_grid.lua" --world "$world" name="$name" size="$size" \
      batch="$batch" steps="$steps" zero="$z" checkpoint="$ck" precision="$p" json="$out" check=0 >&2
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
base = next((r["step_s"] for r in rows if r["name"] == "baseline"), None)
cats = ["params", "grads", "optimizer", "activations", "workspace", "comm", "data"]
mib = lambda b: b / 2**20
print("measured / predicted peak per category on rank 0, MiB; step time vs baseline (measured)")
print("%-18s " % "config" + " ".join("%15s" % c for c in cats) + " %17s %9s" % ("total", "step"))
for r in rows:
    cells = ["%7.1f/%-7.1f" % (mib(r[c]["measured"]), mib(r[c]["predicted"])) for c in cats]
    t = r["total"]
    ratio = r["step_s"] / base if base else 0
    print("%-18s " % r["name"] + " ".join("%15s" % c for c in cells) +
          " %8.1f/%-8.1f %8.2fx" % (mib(t["measured"]), mib(t["predicted"]), ratio))
for r in rows:
    print(json.dumps(r, separators=(",", ":")))
PY
