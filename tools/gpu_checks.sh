#!/usr/bin/env bash
# The GPU measurements of docs/benchmarks.md ("GPU"), by name, for the GPU machine (not a
# test). Build here with `bazel build --config=cuda //trainer:ps_train`, copy the binary to
# the git-ignored .device/ folder with the Debian libraries it links that the GPU machine
# lacks (see tools/gpu_run.sh), then on the GPU machine:
#
#   tools/gpu_checks.sh OUT CHECK [CHECK...]
#
# CHECK: parity | eager | llama1b | llama1b_slice | accum | accum4b | accum4bv | gpt3_6b | startup6b | spec6b | pin6b | gaming | lora8b | largest | nccl1 | peers |
#        state_q | state6b | state8b | none8b | none8b_m05 | sr_cuda (needs .device/device_rounding_test and bench_device_rounding) |
#        adam_cuda (needs .device/device_adam_cuda_test and bench_device_adam) | host_adam (needs .device/bench_adam, -c opt) |
#        nvme (also needs .device/bench_nvme; NVME_BENCH=0 skips it, NVME_STEPS sets the 8B run's steps) |
#        ds_prep | peers_ds | largest_ds | ds8b | ds3b_nvme | all.
# Each writes a few files into OUT (the device tool brings back only a handful per call):
# a log per check and one line per check in OUT/timeline.txt with its exit code and time.
# Runs go to /tmp/gpu_checks; every ps_train run has a time limit (SIGKILL: no checkpoint).
set -u
here=$(cd "$(dirname "$0")" && pwd)
OUT=$1; shift
PS=${PS_TRAIN:-.device/ps_train}
G="$here/gpu_run.sh"
# ps_train in the peer comparisons: chunk size and both budgets chosen by the plan.
PEER_ARGS=(--ps-train "$PS" --ps-set chunk.size_elements=auto --ps-set chunk.device_budget_bytes=0
           --ps-set chunk.host_budget_bytes=0)
R=/tmp/gpu_checks; mkdir -p "$R" "$OUT"
t0=$(date +%s)
log() { echo "$(( $(date +%s) - t0 )) s: $*" >> "$OUT/timeline.txt"; }

# summarise RUN: the summary line, per-metric peaks over the steps, the step breakdowns.
summarise() {
  python3 - "$R/$1/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if "loss" in r and "step" in r]
print(json.dumps([r for r in rows if r.get("summary")][-1:]))
keys = sorted({k for r in steps for k in r if k.startswith(("peak_", "budget", "non_model", "host_", "adam_", "evictions", "grad_"))})
print(json.dumps({k: max(r.get(k, 0) for r in steps) for k in keys}))
brk = ["step_ms", "forward_ms", "backward_ms", "optimizer_ms", "adam_host_ms", "adam_device_ms", "chunk_move_ms"]
for r in steps:
    print(json.dumps({k: r[k] for k in ["step"] + brk if k in r}))
PY
}

# run NAME LIMIT_S ARGS...: ps_train under tools/peak_mem.py (peak host memory), summarised.
run() {
  local name=$1 limit=$2; shift 2
  { $G python3 "$here/peak_mem.py" -- timeout -s KILL "$limit" "$PS" "$@" --set run.output_dir="$R/$name" \
      --set checkpoint.at_end=false --set chunk.timeline_steps=0 --set logging.log_every=1 \
      --set logging.step_breakdown=true 2>&1
    echo "rc=$?"; summarise "$name"; } > "$OUT/$name.log" 2>&1
  log "$name $(grep -o 'rc=[0-9]*' "$OUT/$name.log" | tail -1)"
}

# Offloaded GPT presets: traced budget, host budget from the machine, bf16, checkpointing.
BIG=(--config configs/gpt2_1b-offload.yaml --set run.device=cuda --set chunk.device_budget_bytes=0
     --set chunk.host_budget_bytes=0 --set data.seq_len=1024 --set model.activation_checkpointing=true
     --set train.eval_every=0)
# The gaming-PC config (8 GiB stated device memory, a hard cap) on synthetic data.
GPC=(--config configs/gpt2-1.5b-gaming-pc.yaml --set data.format=synthetic --set data.train_path= --set data.valid_path= --set train.max_steps=4 --set train.eval_every=0)

# cuda_test NAME BINARY: a Catch2 test of a --config=cuda build whose CUDA cases only WARN
# without a device: logged as failed (rc=nocuda) when they checked nothing.
cuda_test() {
  $G timeout 120 "$2" > "$OUT/$1.log" 2>&1
  local rc=$?
  grep -q "checked nothing" "$OUT/$1.log" && rc=nocuda
  log "$1 rc=$rc"
}

check() {
  case $1 in
    parity)  # every placement mode against plain training, fp32 (tools/device_checks.py)
      timeout 150 $G python3 "$here/device_checks.py" --device cuda --ps-train "$PS" --out "$R/parity" --only parity \
        > "$OUT/parity.log" 2>&1; log "parity rc=$?" ;;
    eager)  # issue #9 §6: plain path and chunks against PyTorch eager, gpt2-1.5b micro 8, bf16
      for mode in plain chunks; do
        local extra=(); [ $mode = chunks ] && extra=(--ps-set chunk.enabled=true --ps-set chunk.size_elements=auto)
        timeout 150 $G python3 "$here/bench_vs_eager.py" --device cuda --dtype bf16 --preset gpt2-1.5b --batch-size 8 \
          --steps 10 --repeats 1 --ps-train "$PS" "${extra[@]}" > "$OUT/eager_$mode.log" 2>&1
        log "eager_$mode rc=$?"
      done ;;
    llama1b)  # issue #23: llama-3.2-1b bf16, micro 4 x 2048, plain path and chunks against eager and torch.compile, MFU
      for mode in plain chunks; do
        local extra=(); [ $mode = chunks ] && extra=(--ps-set chunk.enabled=true --ps-set chunk.size_elements=auto)
        timeout 240 $G python3 "$here/bench_vs_eager.py" --device cuda --dtype bf16 --preset llama-3.2-1b \
          --seq-len 2048 --batch-size 4 --steps 10 --repeats 1 --compile --peak-tflops 989 --ps-train "$PS" \
          "${extra[@]}" > "$OUT/llama1b_$mode.log" 2>&1
        log "llama1b_$mode rc=$?"
      done ;;
    llama1b_slice)  # issue #23: as llama1b's plain run with one LM-head slice of all 8,192 tokens (the default is
      # 16 of 512): how much of the gap to eager the slicing costs (the logits' recompute in backward stays)
      timeout 240 $G python3 "$here/bench_vs_eager.py" --device cuda --dtype bf16 --preset llama-3.2-1b \
        --seq-len 2048 --batch-size 4 --steps 10 --repeats 1 --peak-tflops 989 --ps-train "$PS" \
        --ps-set model.loss_slice_tokens=8192 > "$OUT/llama1b_slice.log" 2>&1
      log "llama1b_slice rc=$?" ;;
    accum)  # issue #9 §1: gpt2-1.5b micro 8 x 2 (plain, chunks x2, chunks x1)
      timeout 300 $G python3 "$here/bench_accum.py" --ps-train "$PS" --out "$R/accum" --steps 4 \
        --cases gpt2-1.5b:8:2 > "$OUT/accum.log" 2>&1; log "accum rc=$?" ;;
    accum4b)  # issue #9 §1: GPT2_4B micro 8 x 4 against x 1 (plain does not fit)
      timeout 300 $G python3 "$here/bench_accum.py" --ps-train "$PS" --out "$R/accum4b" --steps 4 \
        --modes chunks_k,chunks_1 --cases GPT2_4B:8:4 --run-timeout-s 140 > "$OUT/accum4b.log" 2>&1
      log "accum4b rc=$?" ;;
    accum4bv)  # issue #9 §1: GPT2_4B micro 8 x 4, horizontal against vertical (both with checkpointing)
      timeout 500 $G python3 "$here/bench_accum.py" --ps-train "$PS" --out "$R/accum4bv" --steps 4 --checkpointing \
        --modes chunks_k,chunks_kv,chunks_1 --cases GPT2_4B:8:4 --run-timeout-s 150 > "$OUT/accum4bv.log" 2>&1
      log "accum4bv rc=$?" ;;
    gpt3_6b)  # issue #9 §3-5: GPT3_6B micro 8: start-up, peak host memory against the pool, step breakdown
      $G "$PS" "${BIG[@]}" --set model.preset=GPT3_6B --set train.micro_batch_size=8 --set train.global_batch_size=8 \
        --plan > "$OUT/plan_GPT3_6B.txt" 2>&1
      run GPT3_6B 200 "${BIG[@]}" --set model.preset=GPT3_6B --set train.micro_batch_size=8 \
        --set train.global_batch_size=8 --set train.max_steps=5 ;;
    startup6b)  # issue #9 §3, §4: GPT3_6B start-up phases and resident memory, the host pool pinned both ways
      # (the chunk start-up line times the pool's reservation; the start-up line splits the rest)
      for pin in host_alloc register; do
        run GPT3_6B_start_$pin 150 "${BIG[@]}" --set model.preset=GPT3_6B --set train.micro_batch_size=8 \
          --set train.global_batch_size=8 --set train.max_steps=2 --set chunk.host_pool_pinning=$pin
        grep -E "chunk start-up|\] start-up [0-9]" "$OUT/GPT3_6B_start_$pin.log" >> "$OUT/startup6b.txt"
      done ;;
    spec6b)  # issue #9 §5: GPT3_6B micro 8 with host chunks updated ahead in backward; both runs with the
      # copy engine (chunk.async_prefetch), which takes the speculated chunks to the host while backward goes on
      run GPT3_6B_async 200 "${BIG[@]}" --set model.preset=GPT3_6B --set train.micro_batch_size=8 \
        --set train.global_batch_size=8 --set train.max_steps=5 --set chunk.async_prefetch=true
      run GPT3_6B_spec 200 "${BIG[@]}" --set model.preset=GPT3_6B --set train.micro_batch_size=8 \
        --set train.global_batch_size=8 --set train.max_steps=5 --set optimizer.speculation_slots=12 \
        --set chunk.async_prefetch=true ;;
    pin6b)  # issue #9 §5: as gpt3_6b and spec6b with the host Adam threads pinned to physical cores
      run GPT3_6B_pin 200 "${BIG[@]}" --set model.preset=GPT3_6B --set train.micro_batch_size=8 \
        --set train.global_batch_size=8 --set train.max_steps=5 --set optimizer.pin_cpu_threads=true
      run GPT3_6B_spec_pin 200 "${BIG[@]}" --set model.preset=GPT3_6B --set train.micro_batch_size=8 \
        --set train.global_batch_size=8 --set train.max_steps=5 --set optimizer.speculation_slots=12 \
        --set chunk.async_prefetch=true --set optimizer.pin_cpu_threads=true ;;
    gaming)  # issue #9 §7: 8 GiB stated device memory (allocator capped): gpt2-1.5b and a 2.22B GPT
      run gpc_1.5b 90 "${GPC[@]}"
      run gpc_2.2b 100 "${GPC[@]}" --set model.preset= --set model.n_layer=42 --set model.n_embd=2048 \
        --set model.n_head=16 --set model.n_positions=1024 --set model.vocab_size=50257 ;;
    lora8b)  # issue #24 §4: Llama 3.1 8B LoRA r 16 on all seven projections, the base drawn from the seed (no
      # download), synthetic data: 8 GiB stated device memory (the allocator capped to it), then the whole card
      local L8=(--config configs/lora-llama-3.1-8b-8gb.yaml --set model.init_from= --set model.preset=llama-3.1-8b
                --set data.format=synthetic --set data.train_path= --set data.valid_path= --set data.packing=false
                --set train.max_steps=4 --set train.eval_every=0 --set checkpoint.export_hf=false
                --set logging.tensorboard=false)
      run lora8b_8gb 280 "${L8[@]}"
      run lora8b_card 280 "${L8[@]}" --set chunk.device_memory_bytes=0 ;;
    state_q)  # issue #25 §1: optimizer.state_dtype fp32/bf16/int8 on CUDA, quick-start model, every chunk on the
      # device (the device update path), 40 steps on synthetic tokens: the losses side by side; a checkpoint at
      # steps 20 and 40 (device chunks written in pieces; 8-bit moments packed one parameter at a time)
      local Q=(--config configs/quickstart.yaml --set run.device=cuda --set data.format=synthetic --set data.train_path=
               --set data.valid_path= --set train.max_steps=40 --set train.eval_every=0 --set chunk.enabled=true
               --set checkpoint.every_steps=20)
      for s in fp32 bf16 int8; do run state_q_$s 60 "${Q[@]}" --set optimizer.state_dtype=$s; done ;;
    state6b)  # issue #25 §1: GPT3_6B micro 8 (as gpt3_6b) with bf16 and with int8 moments: host bytes, step, placement
      for s in bf16 int8; do
        run GPT3_6B_$s 200 "${BIG[@]}" --set model.preset=GPT3_6B --set train.micro_batch_size=8 \
          --set train.global_batch_size=8 --set train.max_steps=5 --set optimizer.state_dtype=$s
      done ;;
    state8b|none8b|none8b_m05)  # issue #25 §1/§3: Llama 3.1 8B full fine-tune, int8 moments, a stated 24 GiB card (allocator
      # capped) and 64 GiB of host: the README's gaming-PC verdict run (its chunk size), random base, synthetic tokens,
      # seq 2048, micro 1; none8b without an fp32 master (optimizer.master_weights none: bf16 weights updated in place
      # with stochastic rounding, bf16 grad chunks; the device path's StochasticRoundInto on CUDA); none8b_m05 as none8b
      # with chunk.margin_use_ratio 0.5: less state on the device, room left to keep its gradient chunks there
      echo "run: {name: $1}" > "$R/$1.yaml"
      local E=(--config "$R/$1.yaml" --set run.device=cuda --set model.type=llama --set model.preset=llama-3.1-8b
               --set model.activation_checkpointing=true --set data.format=synthetic --set data.train_path=
               --set data.valid_path= --set data.seq_len=2048 --set train.micro_batch_size=1 --set train.global_batch_size=1
               --set train.max_steps=4 --set train.eval_every=0 --set precision.dtype=bf16 --set chunk.enabled=true
               --set chunk.device_memory_bytes=$((24 << 30))
               --set chunk.host_budget_bytes=$((64 << 30)) --set optimizer.state_dtype=int8)
      [ "$1" != state8b ] && E+=(--set optimizer.master_weights=none)
      [ "$1" = none8b_m05 ] && E+=(--set chunk.margin_use_ratio=0.5)
      $G "$PS" "${E[@]}" --plan > "$OUT/plan_$1.txt" 2>&1
      run "$1" 300 "${E[@]}" ;;
    sr_cuda)  # issue #25 §1: the CUDA stochastic-rounding kernel bitwise against the CPU specification
      # (device_rounding_test's CUDA case, of a --config=cuda build) and its bandwidth against a device copy
      # (tools/bench_device_rounding)
      cuda_test sr_cuda_test .device/device_rounding_test
      $G timeout 120 "${BENCH_SR:-.device/bench_device_rounding}" > "$OUT/sr_cuda.log" 2>&1; log "sr_cuda rc=$?" ;;
    adam_cuda)  # issue #25 §1: the fused CUDA device update (bf16/8-bit state, no master) bitwise against the CPU
      # kernels (device_adam_cuda_test of a --config=cuda build) and per mode against a device copy's bandwidth
      # (tools/bench_device_adam); both in .device/
      cuda_test adam_cuda_test .device/device_adam_cuda_test
      $G timeout 120 "${BENCH_ADAM:-.device/bench_device_adam}" > "$OUT/adam_cuda.log" 2>&1; log "adam_cuda rc=$?" ;;
    host_adam)  # issue #25 §1: the host Adam kernels on every core of the machine and on 8, m and v in fp32, bf16 and
      # 8-bit, with an fp32 master and without (stochastic rounding), each against a copy probe of its own bytes (a -c opt
      # build of tools/bench_adam in .device/; 2 cores here are compute-bound for 8-bit moments and without a master:
      # does a desktop's core count reach memory bandwidth?)
      local B=${BENCH_HOST_ADAM:-.device/bench_adam}
      for d in int8 bf16 fp32; do  # the open question first
        for mw in fp32 none; do
          for th in 0 8; do
            $G timeout 60 "$B" --threads $th --state-dtype $d --master-weights $mw --error-steps 0 --iters 3 \
              --numel 100000000 2>&1 | grep '^{' | tail -1 >> "$OUT/host_adam.jsonl"
          done
        done
      done
      log "host_adam rows=$(grep -c ps_vs_copy "$OUT/host_adam.jsonl")" ;;
    nvme)  # issue #25 §2: the NVMe tier's ring against this machine's disk (tools/bench_nvme, in .device/ with
      # ps_train), then Llama 3.1 8B exact (fp32 master, m, v) under a stated 24 GiB card and 64 GiB of host with
      # chunk.nvme_dir (the README's verdict: 41.16 GiB in the file), as state8b; the file goes under /tmp
      mkdir -p "$R/nvme"
      if [ "${NVME_BENCH:-1}" != 0 ]; then
        timeout 200 "${BENCH_NVME:-.device/bench_nvme}" --dir "$R/nvme" --chunks 16 --chunk-elements 33554432 --slots 4 \
          --steps 3 --threads 16 > "$OUT/bench_nvme.log" 2>&1; log "bench_nvme rc=$?"
      fi
      echo "run: {name: nvme8b}" > "$R/nvme8b.yaml"
      local N=(--config "$R/nvme8b.yaml" --set run.device=cuda --set model.type=llama --set model.preset=llama-3.1-8b
               --set model.activation_checkpointing=true --set data.format=synthetic --set data.train_path=
               --set data.valid_path= --set data.seq_len=2048 --set train.micro_batch_size=1 --set train.global_batch_size=1
               --set train.max_steps=${NVME_STEPS:-3} --set train.eval_every=0 --set precision.dtype=bf16
               --set chunk.enabled=true --set chunk.device_memory_bytes=$((24 << 30)) --set chunk.host_budget_bytes=$((64 << 30))
               --set chunk.nvme_dir="$R/nvme")
      $G "$PS" "${N[@]}" --plan > "$OUT/plan_nvme8b.txt" 2>&1
      run nvme8b 400 "${N[@]}" ;;
    largest)  # issue #9 §2: the plan's verdict from GPT3_13B down; GPT3_10B trains 3 steps at micro 1
      for m in GPT3_13B GPT3_12B GPT3_11B GPT3_10B; do
        echo "== $m" >> "$OUT/plans.txt"
        $G "$PS" "${BIG[@]}" --set model.preset=$m --set train.micro_batch_size=1 --set train.global_batch_size=1 \
          --plan 2>&1 | grep -E "^(parameters|device|host|optimizer state|largest|fits)" >> "$OUT/plans.txt"
      done
      log "plans done"
      run GPT3_10B 260 "${BIG[@]}" --set model.preset=GPT3_10B --set train.micro_batch_size=1 \
        --set train.global_batch_size=1 --set train.max_steps=3 ;;
    nccl1)  # issue #11 §4: NCCL with one rank, end to end (plain data parallel and ZeRO chunks)
      local Q=(--config configs/quickstart.yaml --set run.device=cuda --set data.format=synthetic --set data.train_path= --set data.valid_path=
               --set train.max_steps=20 --set train.eval_every=0)
      run nccl1_plain_ref 60 "${Q[@]}"
      run nccl1_plain 60 "${Q[@]}" --set distributed.force_collectives=true
      run nccl1_zero_ref 60 "${Q[@]}" --set chunk.enabled=true --set chunk.size_elements=100000
      run nccl1_zero 60 "${Q[@]}" --set chunk.enabled=true --set chunk.size_elements=100000 \
        --set distributed.force_collectives=true ;;
    peers)  # issue #9 §8: against eager, torch.compile and FSDP2 with CPU offload (tools/bench_offload.py)
      timeout 330 $G python3 "$here/bench_offload.py" "${PEER_ARGS[@]}" --preset gpt2-1.5b --batch-size 8 --steps 12 \
        --peers eager,compile,fsdp2 --ps-set optimizer.hybrid_adam=false --timeout-s 150 \
        --out "$OUT/peers_1p5b.json" > "$OUT/peers_1p5b.log" 2>&1; log "peers_1p5b rc=$?" ;;
    ds_prep)  # DeepSpeed from .device/wheels (`bench_offload.py --fetch-deepspeed` here first) installed and
      # its CPU Adam built, each timed: over 4 minutes on a fresh machine, so it goes before peers_ds
      timeout 400 $G python3 "$here/bench_offload.py" --prepare-deepspeed > "$OUT/ds_prep.log" 2>&1
      log "ds_prep rc=$?" ;;
    peers_ds)  # issue #9 §8: against DeepSpeed ZeRO-2 (optimizer offloaded) and ZeRO-3 (parameters too); after ds_prep
      timeout 240 $G python3 "$here/bench_offload.py" "${PEER_ARGS[@]}" --preset gpt2-1.5b --batch-size 8 --steps 12 \
        --peers ds_zero2 --ps-set optimizer.hybrid_adam=false --timeout-s 200 \
        --out "$OUT/peers_ds2.json" > "$OUT/peers_ds2.log" 2>&1; log "peers_ds2 rc=$?"
      timeout 260 $G python3 "$here/bench_offload.py" "${PEER_ARGS[@]}" --preset GPT2_4B --batch-size 8 --steps 8 \
        --checkpointing --peers ds_zero3 --timeout-s 200 --out "$OUT/peers_4b.json" > "$OUT/peers_4b.log" 2>&1
      log "peers_4b rc=$?" ;;
    ds8b)  # issue #25 §3: Llama 3.1 8B full fine-tune under a 24 GiB cap (every runner's allocator capped), ps_train
      # with int8 moments and a 64 GiB host budget, against DeepSpeed ZeRO-3 with CPU offload (its fp32 master, m, v
      # and gradients on the host: ~16 bytes per parameter, more than this machine's RAM, so it may fail: a row
      # with its error); seq 2048, micro 1, checkpointing, 4 steps; after ds_prep
      # (chunk size: the default, as state8b and the README's verdict; runners at most 2 x (200 + 60) s)
      timeout 560 $G python3 "$here/bench_offload.py" --ps-train "$PS" --preset llama-3.1-8b --seq-len 2048 \
        --batch-size 1 --steps 4 --checkpointing --gpu-cap-gib 24 --peers ds_zero3 --timeout-s 200 \
        --ps-set optimizer.state_dtype=int8 --ps-set chunk.host_budget_bytes=$((64 << 30)) \
        --out "$OUT/ds8b.json" > "$OUT/ds8b.log" 2>&1
      log "ds8b rc=$?" ;;
    ds3b_nvme)  # issue #25 §3: exact fp32 state on the disk, Llama 3.2 3B (8B's 96 GB of DeepSpeed optimizer state
      # exceeds this machine's 64 GiB disk): ps_train with chunk.nvme_dir against ZeRO-3 with the optimizer on NVMe
      # (ZeRO-Infinity; DeepSpeed builds its async_io op, which needs libaio), 24 GiB cap, 4 steps; after ds_prep
      # ps_train: every host-updated chunk's state in the file (chunk.nvme_host_budget_bytes 0: 3B would
      # otherwise fit the 64 GiB of RAM)
      mkdir -p "$R/nvme_ps" "$R/nvme_ds"
      local NV=(--ps-set chunk.host_budget_bytes=$((64 << 30)) --ps-set chunk.nvme_dir="$R/nvme_ps"
                --ps-set chunk.nvme_host_budget_bytes=0)
      timeout 560 $G python3 "$here/bench_offload.py" --ps-train "$PS" --preset llama-3.2-3b --seq-len 2048 \
        --batch-size 1 --steps 4 --checkpointing --gpu-cap-gib 24 --peers ds_zero3 --ds-nvme "$R/nvme_ds" \
        --timeout-s 200 "${NV[@]}" --out "$OUT/ds3b_nvme.json" > "$OUT/ds3b_nvme.log" 2>&1
      log "ds3b_nvme rc=$?"
      rm -rf "$R/nvme_ds" ;;  # DeepSpeed's swap files (ps_train's are unlinked at exit)
    largest_ds)  # issue #9 §8: the largest ladder model DeepSpeed ZeRO-3 offload trains (micro 1, checkpointing),
      # against the `largest` check's ps_train figure; both in one table: --runners ps_train,ds_zero3 (over 10 min)
      timeout 590 $G python3 "$here/bench_offload.py" --ps-train "$PS" --largest --runners ds_zero3 --batch-size 1 \
        --steps 3 --checkpointing --ladder GPT2_4B,GPT3_6B,GPT3_8B --timeout-s 150 --out "$OUT/largest_ds.json" \
        > "$OUT/largest_ds.log" 2>&1; log "largest_ds rc=$?" ;;
    all) for c in parity eager llama1b accum accum4b accum4bv gpt3_6b startup6b spec6b pin6b gaming largest nccl1 peers ds_prep peers_ds largest_ds state_q state6b state8b; do
           check $c; done ;;
    *) echo "unknown check: $1" >&2; exit 2 ;;
  esac
}

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; date -u; } >> "$OUT/timeline.txt" 2>&1
for c in "$@"; do check "$c"; done
