#!/usr/bin/env bash
# Runs a command with the LibTorch, CUDA and NCCL libraries of this machine's python3
# `torch` on LD_LIBRARY_PATH. For the GPU machine, which has torch 2.11.0+cu130 but no
# Bazel: ps_train is built elsewhere with `bazel build --config=cuda //trainer:ps_train`,
# copied into the git-ignored .device/ folder that travels with the checkout, and run
# there through this script, e.g.
#   tools/gpu_run.sh python3 tools/device_checks.py --device cuda --ps-train .device/ps_train --out "$OUT"
set -euo pipefail
libs=$(python3 - <<'PY'
import glob, os
import torch
torch_dir = os.path.dirname(torch.__file__)
site = os.path.dirname(torch_dir)
dirs = [os.path.join(torch_dir, "lib")]
dirs += sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib")))
dirs += sorted(glob.glob(os.path.join(site, "nvidia", "*", "*", "lib")))
print(":".join(d for d in dirs if os.path.isdir(d)))
PY
)
# Debian libraries ps_train links that the GPU machine lacks (libgloo0 and its
# dependencies), copied next to the binary: cp -L $(ldd ps_train | ...) .device/lib/
carried="$(cd "$(dirname "$0")/.." && pwd)/.device/lib"
[ -d "$carried" ] && libs="$libs:$carried"
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$@"
