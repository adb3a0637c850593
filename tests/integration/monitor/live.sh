#!/usr/bin/env bash
# The monitor on a live two-rank job whose ranks publish values the test knows
# (scripts/steps.lua), run twice: once with stderr a file, scraping Prometheus' /metrics
# while the ranks wait, then checking metrics.jsonl, the TensorBoard file, the report (in
# Chromium, with the model's stages and a memory prediction) and the plain progress
# lines; once on a terminal (script(1) gives it one), checking the progress
# line is redrawn in place and rank output scrolls above it, never mixed into it.
# usage: live.sh DSLAUNCH MONITOR_CHECK SOURCE_DIR
set -uo pipefail
dslaunch=$1 check=$2 src=$3
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -KILL $pid 2>/dev/null; rm -rf "$tmp"' EXIT
fail() {
    echo "FAIL: $*"
    for f in "$tmp"/out "$tmp"/err "$tmp"/logs/live/latest/launcher.log; do [ -f "$f" ] && { echo "--- $f"; tail -n 30 "$f"; }; done
    exit 1
}
N=6
cat >"$tmp/job.ini" <<INI
[job]
name = live
script = $src/tests/integration/monitor/scripts/steps.lua
args = $N $tmp/release
workdir = $tmp
[resources]
num_gpus = 2
device = cpu
[monitor]
steps_per_print = 2
metrics_port = 0
INI

# Waits (up to 60 s) until the command succeeds.
wait_for() {
    local deadline=$((SECONDS + 60))
    until "$@"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.05
    done
}
# GET path from the endpoint: the whole answer, headers included.
get() { timeout 10 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port && printf 'GET $1 HTTP/1.0\r\n\r\n' >&3 && cat <&3"; }

"$dslaunch" --log_dir "$tmp/logs" "$tmp/job.ini" >"$tmp/out" 2>"$tmp/err" &
pid=$!
log=$tmp/logs/live/latest/launcher.log
wait_for grep -q "Prometheus metrics at" "$log" 2>/dev/null || fail "no endpoint announced"
port=$(sed -n 's|.*Prometheus metrics at http://127.0.0.1:\([0-9]*\)/metrics.*|\1|p' "$log")
[ -n "$port" ] || fail "no port in: $(grep Prometheus "$log")"
job=$(sed -n 's/.*"job":"\(live-[0-9a-f]*\)".*/\1/p' "$log" | head -1) # launcher.log: JSON lines
scrape() { get /metrics >"$tmp/scrape" && grep -qF "ds_step{job=\"$job\"} $N" "$tmp/scrape"; }
wait_for scrape || fail "the endpoint never showed step $N"
for want in "HTTP/1.1 200 OK" "Content-Type: text/plain; version=0.0.4" \
            "ds_total_steps{job=\"$job\"} $N" "ds_ranks_reporting{job=\"$job\"} 2" \
            "ds_loss{job=\"$job\"} $((100 - N))" "ds_learning_rate{job=\"$job\"} 0.005859375" \
            "ds_grad_norm{job=\"$job\"} $((2 * N))" "ds_loss_scale{job=\"$job\"} 1024" \
            "ds_skipped_steps_total{job=\"$job\"} 1" "ds_tokens_per_second{job=\"$job\"} 400" \
            "ds_step_time_seconds{job=\"$job\",stat=\"rank0\"} 0.5" \
            "ds_step_time_seconds{job=\"$job\",stat=\"median\"} 0.625" \
            "ds_step_time_seconds{job=\"$job\",stat=\"max\"} 0.75" \
            "ds_comm_wait_seconds{job=\"$job\",stat=\"max\"} 0" \
            "ds_restarts_total{job=\"$job\"} 0"; do
    grep -qF "$want" "$tmp/scrape" || fail "the scrape lacks: $want"
done
grep -q '^ds_memory_bytes{job="'"$job"'",category="total",kind="peak",stat="max"} [0-9]' "$tmp/scrape" ||
    fail "no memory in the scrape"
get /other | grep -q "404 Not Found" || fail "/other is not 404"
touch "$tmp/release"
wait $pid || fail "dslaunch exited $?"
pid=
echo "scraped: $(grep -c '^ds_' "$tmp/scrape") samples, as published"

dir=$tmp/logs/live/latest/attempt-0
"$check" jsonl "$dir" $N 2 || fail "metrics.jsonl"
"$check" tfevents "$dir" || fail "TensorBoard file"
last=$(tail -n 1 "$dir/metrics.jsonl")
for want in '"step":6,' '"loss":94,' '"tokens":300,' '"tokens_per_s":400,' '"skipped":false,' '"skipped_steps":1,' \
            '"step_time":{"rank0":0.5,"min":0.5,"median":0.625,"max":0.75,"max_rank":1}'; do
    [[ $last == *"$want"* ]] || fail "the last row lacks $want: $last"
done
# The scrape's memory is the last row's.
peak=$(sed -n 's/^ds_memory_bytes{.*category="total",kind="peak",stat="max"} //p' "$tmp/scrape")
[[ $last == *'"total":{'*'"peak":{'*'"max":'"$peak,"* ]] || fail "memory: scrape $peak, row: $last"
# The report in a browser, with the stages and the prediction the script gave.
"$here/report_chromium.sh" "$dir" "$tmp/report.png" predicted || fail "report.html"
grep -q '"predicted":{"params":4096,"grads":4096,"activations":8192}' "$dir/report.html" ||
    fail "the prediction is not in the report's data"
# Plain progress lines every 2 steps and at the last, on stderr.
grep -c '^dslaunch: step [246]/6 ' "$tmp/err" | grep -qx 3 || fail "progress lines: $(grep '^dslaunch: step' "$tmp/err")"
grep -qF 'dslaunch: step 6/6 (100%) | loss 94.0000 | 400 tok/s | ETA 0s |' "$tmp/err" || fail "the last progress line"
grep -qF '| skipped 1 | restarts 0' "$tmp/err" || fail "skipped and restarts in the line"
echo "progress: $(grep -c '^dslaunch: step' "$tmp/err") plain lines"

# On a terminal: one line redrawn in place, rank lines above it. The same job name again,
# at once: its files go to a new run directory, which latest then names (one TensorBoard file, this run's).
sed -i '/^metrics_port/d' "$tmp/job.ini"
timeout 120 script -qefc "'$dslaunch' --log_dir '$tmp/logs' '$tmp/job.ini'" /dev/null >"$tmp/tty" 2>&1 </dev/null ||
    fail "dslaunch on a terminal exited $?: $(tail -c 2000 "$tmp/tty")"
grep -qF $'\r\e[Kstep 6/6 (100%)' "$tmp/tty" || fail "no line redrawn in place"
grep -q '^dslaunch: step' "$tmp/tty" && fail "plain progress lines on a terminal"
# What the terminal shows: each line's text after its last carriage return.
vis=$(sed $'s/\r$//' "$tmp/tty" | awk -F'\r' '{print $NF}' | sed 's/\x1b\[K//g')
for r in 0 1; do
    [ "$(grep -c "^\[localhost:$r\] published step [1-6]$" <<<"$vis")" -eq $N ] || fail "rank $r's lines on the terminal: $vis"
done
grep -q 'published.*| loss\|| loss.*published' <<<"$vis" && fail "a rank line mixed with the progress line: $vis"
grep -q '^step 6/6 (100%) | loss 94.0000' <<<"$vis" || fail "the last progress line is not left on the terminal: $vis"
echo "terminal: the progress line redrawn in place, $((2 * N)) rank lines above it"
"$check" tfevents "$dir" || fail "the second run's TensorBoard file"
