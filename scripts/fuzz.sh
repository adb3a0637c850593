#!/usr/bin/env bash
# fuzz.sh [SECONDS] [TARGET...]: builds the libFuzzer targets with clang in build-fuzz/
# and runs each for SECONDS (default 60). Seeds come from tests/fuzz/seeds/<name>/; the
# growing corpus stays in build-fuzz/corpus/<name>/ and any crash in
# build-fuzz/artifacts/<name>/ (reproduce: build-fuzz/tests/fuzz/<target> FILE).
# Exits non-zero when a target finds a crash.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(fuzz_hostfile fuzz_filter fuzz_jobspec fuzz_json fuzz_json_read fuzz_safetensors
           fuzz_ckpt_shard fuzz_store_server fuzz_tokens)
fi

CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDS_FUZZ=ON -DDS_WITH_CUDA=OFF >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]}"

status=0
for t in "${targets[@]}"; do
  name=${t#fuzz_}
  corpus=build-fuzz/corpus/$name artifacts=build-fuzz/artifacts/$name
  mkdir -p "$corpus" "$artifacts"
  dict=()
  [[ -f tests/fuzz/$name.dict ]] && dict=(-dict="tests/fuzz/$name.dict")
  echo "== $t: ${secs}s"
  if ! "build-fuzz/tests/fuzz/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 "${dict[@]}" -artifact_prefix="$artifacts/" \
      "$corpus" "tests/fuzz/seeds/$name" 2>"build-fuzz/$t.log"; then
    echo "$t: FOUND A CRASH (log: build-fuzz/$t.log, input in $artifacts/)"
    grep -E "ERROR|SUMMARY|runtime error" "build-fuzz/$t.log" | head -5 || true
    status=1
  fi
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "build-fuzz/$t.log" | tr '\n' ' ' || true
  echo "corpus: $(find "$corpus" -type f | wc -l) inputs"
done
exit $status
