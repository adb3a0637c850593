#!/usr/bin/env bash
# Builds dslaunch and runs the example job on this node (no SSH): a small GPT trained on
# the project's own synthetic corpus. Extra arguments go to dslaunch (e.g. --num_gpus 2).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh build -DCMAKE_BUILD_TYPE=Release

# The training data is generated here (nothing is downloaded, nothing committed).
./build/runtime/dsrun run examples/gpt/make_data.lua >/dev/null
exec ./build/launcher/dslaunch "$@" examples/gpt/job.ini
