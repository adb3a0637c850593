#!/usr/bin/env bash
# Installs every Debian package the build and the tests need. Idempotent: when all are
# present it only asks dpkg and returns (well under a second).
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config clang
  libssh2-1-dev libcurl4-openssl-dev libssl-dev libinih-dev liblua5.4-dev lua5.4
  libcmocka-dev libopenblas-dev libgloo-dev
  openssh-server openssh-client iproute2 procps psmisc
  xz-utils   # the GPU bundle's archive (scripts/gpu-check.sh bundle) and its test
  slurmctld slurmd slurm-client  # a private Slurm cluster for the Slurm tests (docs/slurm.md)
  chromium   # headless, to test report.html in a real browser (tests/integration/monitor)
  # a real torchrun-style program for the launcher's tests (DDP over Gloo); the bench's
  # PyTorch peer too. ~160 packages: about 2 minutes on a fresh machine
  python3-torch
)
if [[ "${1:-}" == "--bench" ]]; then
  PACKAGES+=(python3-numpy)   # the bench's comparisons, not needed by tests
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) != 0 ]]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=300 update -qq
$SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}"
