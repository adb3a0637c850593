#!/usr/bin/env bash
# The planner's story (docs/memory.md): a GPT that does not fit a memory_limit at ZeRO 0,
# fp32, no checkpointing fails with the budget error and the planner's recommendation;
# the same script with zero/checkpoint/precision = 'auto' fits, trains, and its losses
# stay within tolerance of the run at a limit large enough for the plain choice.
set -euo pipefail
DSRUN=${DSRUN:?path of dsrun}
here=$(cd "$(dirname "$0")" && pwd)
script=$here/memplan_story.lua
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export DS_PLAN_CACHE=$out/cache

# The plan of the plain choice: its predicted peak.
"$DSRUN" plan-memory "$script" > "$out/plan.txt"
peak=$(awk '/^peak bytes:/ {print $3}' "$out/plan.txt")
[[ -n $peak ]] || { cat "$out/plan.txt"; echo "no predicted peak"; exit 1; }
limit=$((peak * 3 / 4))

# 1. Too big: the budget error names the limit and what the planner recommends.
if DS_ENGINE_MEMORY_LIMIT=$limit "$DSRUN" run "$script" > "$out/fail.txt" 2>&1; then
    cat "$out/fail.txt"; echo "the plain choice ran within $limit bytes"; exit 1
fi
grep -q "beyond this rank's memory_limit" "$out/fail.txt" || { cat "$out/fail.txt"; exit 1; }
grep -q "memory plan: this choice needs .*recommended: " "$out/fail.txt" || { cat "$out/fail.txt"; exit 1; }

# 1b. dsrun plan-memory says so too (exit 3) and recommends.
set +e
DS_ENGINE_MEMORY_LIMIT=$limit "$DSRUN" plan-memory "$script" > "$out/plan_limit.txt"
rc=$?
set -e
[[ $rc == 3 ]] || { cat "$out/plan_limit.txt"; echo "plan-memory exit $rc, expected 3"; exit 1; }
grep -q "^recommended: " "$out/plan_limit.txt" || { cat "$out/plan_limit.txt"; exit 1; }

# 2. 'auto' under the same limit: the planner's choice fits and trains.
DS_ENGINE_MEMORY_LIMIT=$limit "$DSRUN" run "$script" zero=auto checkpoint=auto precision=auto \
    out="$out/auto.txt" > "$out/auto.log" 2>&1 || { cat "$out/auto.log"; exit 1; }
grep "memory plan: auto chose" "$out/auto.log"

# 3. The plain choice with room: the losses agree.
DS_ENGINE_MEMORY_LIMIT=$((peak * 2)) "$DSRUN" run "$script" out="$out/base.txt" > "$out/base.log" 2>&1 ||
    { cat "$out/base.log"; exit 1; }
paste "$out/base.txt" "$out/auto.txt" | awk '
    { d = $2 - $4; if (d < 0) d = -d; if (d > m) m = d; if (d > 0.02 + 0.01 * $2) bad = 1 }
    END { printf "largest loss difference over %d steps: %.2g\n", NR, m; exit bad }'
# 4. Over dslaunch: --plan-memory prints the plan (exit 3: does not fit); a launch is
# refused before anything starts; 'auto' launches and trains.
if [[ -n ${DSLAUNCH:-} ]]; then
    cat > "$out/job.ini" <<INI
[job]
name = story
script = $script
workdir = $out
[resources]
num_gpus = 1
[engine]
memory_limit = $limit
INI
    set +e
    "$DSLAUNCH" --plan-memory "$out/job.ini" > "$out/launch_plan.txt" 2>&1
    rc=$?
    "$DSLAUNCH" "$out/job.ini" > "$out/launch.txt" 2>&1
    rc2=$?
    set -e
    [[ $rc == 3 ]] || { cat "$out/launch_plan.txt"; echo "dslaunch --plan-memory exit $rc"; exit 1; }
    [[ $rc2 == 2 ]] && grep -q "predicts this job does not fit" "$out/launch.txt" ||
        { cat "$out/launch.txt"; echo "dslaunch exit $rc2: not refused"; exit 1; }
    [[ ! -d $out/logs ]] || { echo "a refused job started ranks"; exit 1; }
    "$DSLAUNCH" --set engine.zero_stage=0 "$out/job.ini" -- zero=auto checkpoint=auto precision=auto \
        > "$out/launch_auto.txt" 2>&1 || { cat "$out/launch_auto.txt"; exit 1; }
    grep -q "trained 12 steps" "$out/launch_auto.txt" || { cat "$out/launch_auto.txt"; exit 1; }

    # 5. 'auto' in the job's [engine] (the script leaves the stages' options to the job):
    # the plan before launch chooses, the run chooses the same and trains.
    "$DSLAUNCH" --set engine.zero_stage=auto --set engine.checkpointing=auto --set engine.precision=auto \
        "$out/job.ini" -- from_job=1 > "$out/launch_engine_auto.txt" 2>&1 ||
        { cat "$out/launch_engine_auto.txt"; exit 1; }
    grep -q "memory plan: auto chose .*of a limit of" "$out/launch_engine_auto.txt" &&
        grep -q "trained 12 steps" "$out/launch_engine_auto.txt" || { cat "$out/launch_engine_auto.txt"; exit 1; }

    # 6. A GPU rank's budget is its device's free memory: on the simulated GPU, sized to
    # the limit and with no memory_limit, the plain job is refused before launch, and
    # [engine] ... = auto fits the device and trains.
    sed '/^memory_limit/d' "$out/job.ini" > "$out/sim.ini"
    printf 'device = sim\n' >> "$out/sim.ini"
    set +e
    DS_SIM_MEMORY=$limit "$DSLAUNCH" "$out/sim.ini" -- from_job=1 > "$out/sim_plain.txt" 2>&1
    rc=$?
    set -e
    [[ $rc == 2 ]] && grep -q "does not fit the device's free memory" "$out/sim_plain.txt" &&
        grep -q "limit .*the free memory of device sim" "$out/sim_plain.txt" ||
        { cat "$out/sim_plain.txt"; echo "dslaunch exit $rc: the sim job was not refused"; exit 1; }
    DS_SIM_MEMORY=$limit "$DSLAUNCH" --set engine.zero_stage=auto --set engine.checkpointing=auto \
        --set engine.precision=auto "$out/sim.ini" -- from_job=1 > "$out/sim_auto.txt" 2>&1 ||
        { cat "$out/sim_auto.txt"; exit 1; }
    grep -q "memory plan: auto chose .*of a limit of" "$out/sim_auto.txt" &&
        grep -q "trained 12 steps" "$out/sim_auto.txt" || { cat "$out/sim_auto.txt"; exit 1; }
fi
echo "memplan story ok"
