#!/usr/bin/env bash
# report.html in a real browser (headless Chromium): loaded from file with no network,
# its script must draw every chart (the DOM holds each series with as many points as
# metrics.jsonl has rows, a bar per rank per memory category, the stages, the events,
# a marker per skipped step) and log nothing to the console. A screenshot is kept.
# With "predicted", the script gave a memory prediction: it must be drawn on every rank.
# usage: report_chromium.sh ATTEMPT_DIR SCREENSHOT.png [predicted]
set -uo pipefail
dir=$1 png=$2 predicted=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
command -v chromium >/dev/null || fail "chromium is not installed (scripts/install-deps.sh installs it)"
page=$dir/report.html rows=$dir/metrics.jsonl
[ -f "$page" ] && [ -f "$rows" ] || fail "no report.html or metrics.jsonl in $dir"
browse() {
    timeout 120 chromium --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$tmp/profile" \
        --enable-logging=stderr --v=0 --virtual-time-budget=5000 "$@" "file://$page"
}
browse --dump-dom >"$tmp/dom" 2>"$tmp/log"
# A missing page would still exit 0 with an empty DOM: the content decides.
grep -q 'data-rendered="ok"' "$tmp/dom" || fail "the page did not render: $(grep -o 'id="errors"[^<]*<*[^<]*' "$tmp/dom")"
grep ':CONSOLE' "$tmp/log" && fail "the page wrote to the console"
n=$(wc -l <"$rows")
((n > 0 && n <= 2000)) || fail "$n rows (this check expects every step on the page)"
has() { grep -qF -- "$1" "$tmp/dom" || fail "the DOM lacks $1"; }
count() { grep -oF -- "$1" "$tmp/dom" | wc -l; }
for s in loss lr tokens_per_s step_time_min step_time_median step_time_max compute_max comm_wait_median comm_wait_max \
         mem_peak_max grad_norm; do
    nulls=$(grep -c "\"$s\":null" "$rows")
    case $s in step_time_*|compute_*|comm_wait_*|mem_*) nulls=0 ;; esac
    has "data-series=\"$s\" data-n=\"$((n - nulls))\""
done
skipped=$(grep -c '"skipped":true' "$rows")
if ((skipped > 0)); then
    has 'data-series="loss_scale" data-n="'"$n"'"'
    [ "$(count 'data-marker="skipped"')" -eq "$skipped" ] || fail "$(count 'data-marker="skipped"') skipped markers, $skipped skipped steps"
fi
ranks=$(grep -o '"ranks":[0-9]*' "$rows" | head -1 | cut -d: -f2)
# The categories that hold memory (the largest peak of the last row above 0) have bars.
held=
for cat in params grads optimizer activations; do
    max=$(tail -n 1 "$rows" | grep -o "\"$cat\":{\"current\":{[^}]*},\"peak\":{[^}]*}" | sed 's/.*"max":\([0-9.e+]*\).*/\1/')
    awk -v m="${max:-0}" 'BEGIN { exit !(m > 0) }' && held="$held $cat"
done
[ -n "$held" ] || fail "no memory category holds anything"
for ((r = 0; r < ranks; r++)); do
    for cat in $held; do has "data-series=\"mem:$cat\" data-rank=\"$r\""; done
    has "data-series=\"compute_mean\" data-rank=\"$r\""
    [ -z "$predicted" ] || has "data-series=\"predicted\" data-rank=\"$r\""
done
# Each stage the script reported (rank 0's "stage NAME ..." lines) in the stage table.
for st in $(sed -n 's/^ *stage \([^ ]*\) .*/\1/p' "$dir/rank-0.out"); do has "<tr><td>$st</td>"; done
has 'id="stages"'
has 'id="events"'
has 'all '"$ranks"' ranks started'
grep -q 'class="status-finished">finished<' "$tmp/dom" || fail "the final report does not say finished"
echo "report.html: rendered, $n points per curve, $ranks ranks' bars ($held${predicted:+, predicted}), $skipped skipped steps marked, no console output"

browse --hide-scrollbars --window-size=1280,2600 --screenshot="$png" >/dev/null 2>&1
[ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' ')" = 89504e470d0a1a0a ] || fail "no PNG screenshot at $png"
(($(stat -c %s "$png") > 50000)) || fail "the screenshot is nearly empty"
echo "screenshot: $png ($(stat -c %s "$png") bytes)"
