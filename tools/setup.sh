#!/usr/bin/env bash
# Installs what ps_train needs on Debian 12 (bookworm), idempotently:
#   apt:  Bazel 4.2.3 (bazel-bootstrap) + platforms, g++, yaml-cpp, spdlog/fmt, cxxopts,
#         Catch2, nlohmann-json, libssl-dev (SHA-256 of checkpoints), libicu-dev (tokenizer
#         regex), libprotobuf-dev + protobuf-compiler (TensorBoard event files), liburing-dev
#         (the NVMe tier) (see ../shared/TOOLCHAIN.md for why these versions)
#   PyPI: torch==2.11.0 (--no-deps), whose wheel carries a complete LibTorch (headers +
#         libtorch_cpu/libc10, and the CUDA libraries for --config=cuda).
# Already-installed pieces are skipped, so a second run takes about a second.
# LIBTORCH=/path/to/libtorch skips the wheel and builds against that LibTorch instead.
set -euo pipefail

TORCH_VERSION=2.11.0
APT_PACKAGES=(bazel-bootstrap bazel-platforms g++ python3 libyaml-cpp-dev libspdlog-dev
              libfmt-dev libcxxopts-dev catch2 nlohmann-json3-dev libssl-dev libicu-dev
              libprotobuf-dev protobuf-compiler libgloo-dev liburing-dev)

log() { echo "[setup] $*"; }

sudo_if_needed() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  sudo_if_needed apt-get update -qq
  sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ -n "${LIBTORCH:-}" ]; then
  log "using LIBTORCH=$LIBTORCH"
else
  installed=$(python3 -m pip show torch 2>/dev/null | sed -n 's/^Version: //p' || true)
  if [ "${installed%%+*}" != "$TORCH_VERSION" ]; then
    if ! python3 -m pip --version >/dev/null 2>&1; then
      sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null
    fi
    log "pip install --no-deps torch==$TORCH_VERSION (LibTorch for C++; ~900 MB download)"
    # Debian's own python3 refuses pip installs (PEP 668) unless told; torch is not a
    # Debian package, so nothing of Debian's is overwritten.
    python3 -m pip install -q --no-deps "torch==$TORCH_VERSION" 2>/dev/null ||
      python3 -m pip install -q --no-deps --break-system-packages "torch==$TORCH_VERSION"
  fi
fi
# Bazel's sandbox builds every action a symlink tree of its inputs (LibTorch's headers):
# about 1.1 s per action on this disk, 0.1 s on a tmpfs (docs/benchmarks.md, "The quick
# start on a fresh clone"). .bazelrc imports .bazelrc.machine, written here where
# /dev/shm is a tmpfs with room for the outputs that pass through it (4 GiB free). The
# tests' TEST_TMPDIR then moves out of the sandbox to the output base (as `bazel info`
# names it), so it stays on a disk: the NVMe tier's tests refuse a tmpfs. Under sudo the
# file would name root's output base, not the user's: not written then.
repo=$(cd "$(dirname "$0")/.." && pwd -P)
shm_free_kib=$(df -k --output=avail /dev/shm 2>/dev/null | tail -1 | tr -d ' ' || true)
out_base=""
if [ -z "${SUDO_USER:-}" ] && [ "$(stat -f -c %T /dev/shm 2>/dev/null || true)" = tmpfs ] &&
   [ "${shm_free_kib:-0}" -ge 4194304 ]; then
  out_base=$(cd "$repo" && bazel info output_base 2>/dev/null || true)
fi
if [ -n "$out_base" ]; then
  test_tmp="$out_base/ps_test_tmp"
  mkdir -p "$test_tmp"
  printf 'build --sandbox_base=/dev/shm\ntest --test_tmpdir=%s\n' "$test_tmp" > "$repo/.bazelrc.machine"
else
  rm -f "$repo/.bazelrc.machine"
fi
log "ready (Bazel 4.2.3 from Debian, LibTorch $TORCH_VERSION)"
