# shellcheck shell=bash
# Source me:  source tools/python_peer_env.sh
#
# Makes `import torch` work for the *Python peers* only: the PyTorch-eager baseline in
# tools/bench_vs_eager.py and the fixture generator tools/gen_gpt_fixture.py.
# ps_train itself never uses Python; it links the LibTorch inside the wheel (tools/setup.sh).
#
# The torch==2.11.0 wheel is installed with --no-deps (tools/setup.sh), so the libraries
# its libtorch_cuda.so loads at import time are missing. Most come from the CUDA 13.0
# toolkit in /usr/local/cuda/lib64; three do not, and are installed here (--no-deps,
# versions pinned by torch 2.11.0 / cuda-toolkit==13.0.2):
#   nvidia-cufile==1.15.1.6        libcufile.so.0       (nvidia-cufile-cu13 is a deprecated stub)
#   nvidia-cusparselt-cu13==0.8.0  libcusparseLt.so.0
#   nvidia-nvshmem-cu13==3.4.5     libnvshmem_host.so.3
# libtorch_cuda.so finds these through its RPATH ($ORIGIN/../../nvidia/{cu13,cusparselt,
# nvshmem}/lib), so only the toolkit directory goes on LD_LIBRARY_PATH (and only matters
# where /usr/local/cuda is not already in ld.so.conf). Idempotent: does nothing but the
# export when `import torch` already works. Needs no GPU; the peers run on the CPU.

_peer_env_main() {
  local cuda_lib=/usr/local/cuda/lib64
  if [ -d "$cuda_lib" ] && [[ ":${LD_LIBRARY_PATH:-}:" != *":$cuda_lib:"* ]]; then
    export LD_LIBRARY_PATH="$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  if python3 -c 'import torch' >/dev/null 2>&1; then
    return 0
  fi
  local pkgs=(nvidia-cufile==1.15.1.6 nvidia-cusparselt-cu13==0.8.0 nvidia-nvshmem-cu13==3.4.5)
  echo "[python_peer_env] pip install --no-deps ${pkgs[*]}" >&2
  python3 -m pip install -q --no-deps "${pkgs[@]}" 2>/dev/null ||
    python3 -m pip install -q --no-deps --break-system-packages "${pkgs[@]}" || return 1
  if ! python3 -c 'import torch' >/dev/null 2>&1; then
    echo "[python_peer_env] import torch still fails:" >&2
    python3 -c 'import torch' 2>&1 | tail -n 1 >&2
    return 1
  fi
}

if _peer_env_main; then
  unset -f _peer_env_main
else
  unset -f _peer_env_main
  # shellcheck disable=SC2317
  return 1 2>/dev/null || exit 1  # `exit` only when run rather than sourced
fi
