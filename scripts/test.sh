#!/usr/bin/env bash
# Builds everything and runs every test: the whole suite in a normal (Release) build,
# then the unit suites again under AddressSanitizer + UBSan. This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
# The Slurm tests make their own allocations in a private cluster; an allocation around
# the suite would make every other test's job (no hostfile) a Slurm job.
unset SLURM_JOB_ID SLURM_JOBID

./scripts/build.sh build -DCMAKE_BUILD_TYPE=Release
(cd build && ctest --output-on-failure --timeout 600)

# CUDA is left out of the sanitizer build: nvcc's host code is not instrumented and
# the normal build above already compiles and links it.
./scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDS_SANITIZE=ON -DDS_WITH_CUDA=OFF
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest -L unit --output-on-failure --timeout 900)
