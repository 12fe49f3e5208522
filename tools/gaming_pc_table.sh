#!/usr/bin/env bash
# The README's gaming-PC verdicts: what `ps_train --plan` admits on a 24 GiB card with
# 64 GiB of host memory and on an 8 GiB card with 32 GiB, per model and training mode.
# Nothing is allocated or downloaded (model.preset shapes, synthetic data, the simulated
# device tier with the stated card size). Prints a markdown table; each cell is the
# plan's verdict and its host bytes (and the NVMe tier's file, where it has one), or how
# far short it is.
#
#   tools/gaming_pc_table.sh [PS_TRAIN]    (default bazel-bin/trainer/ps_train, built first)
#
# Every run: bf16 compute, activation checkpointing, micro-batch 1 with no accumulation
# (gradients in the compute slots), seq 2048 (1024 for GPT-2), the default chunk.size_elements.
#
# The budgets are the machine's memory less what ps_train cannot have of it, allowances
# rather than measurements except where stated: on the card 1 GiB (the CUDA context and a
# desktop's display), on the host 6 GiB (the OS and a desktop, and ps_train's own memory
# outside its chunks, which chunk.host_budget_bytes does not count: 2.2 GiB measured on
# the 8B run, docs/benchmarks.md).
DEVICE_RESERVE_GIB=1
HOST_RESERVE_GIB=6
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-}
if [ -z "$bin" ]; then
  bazel build //trainer:ps_train 2>/dev/null
  bin=bazel-bin/trainer/ps_train
fi
gib=$((1 << 30))
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "run: {name: gaming-pc}" > "$tmp/base.yaml"

# verdict MODEL MODE DEVICE_BUDGET_GIB HOST_BUDGET_GIB
verdict() {
  local model=$1 mode=$2 device=$3 host=$4 type=llama seq=2048
  case $model in gpt2-*) type=gpt seq=1024 ;; esac
  local args=(--set model.type=$type --set model.preset="$model" --set model.activation_checkpointing=true
              --set data.format=synthetic --set data.seq_len=$seq --set train.micro_batch_size=1
              --set train.global_batch_size=1 --set precision.dtype=bf16 --set chunk.enabled=true
              --set chunk.device_tier=simulated --set chunk.device_memory_bytes=$((device * gib))
              --set chunk.host_budget_bytes=$((host * gib)) --set run.output_dir="$tmp/run")
  case $mode in
    fp32) args+=(--set optimizer.state_dtype=fp32) ;;
    bf16) args+=(--set optimizer.state_dtype=bf16) ;;
    int8) args+=(--set optimizer.state_dtype=int8) ;;
    none) args+=(--set optimizer.state_dtype=int8 --set optimizer.master_weights=none) ;;
    nvme) args+=(--set optimizer.state_dtype=fp32 --set chunk.nvme_dir="$tmp") ;;  # the table takes the plan's fits line: the budgets' verdict, not this machine's disk
    lora) args+=(--set lora.enabled=true --set lora.r=16
                 --set "lora.target_modules=[q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]") ;;
  esac
  [ "$type" = gpt ] && [ "$mode" = lora ] && args+=(--set "lora.target_modules=[c_attn, c_proj, c_fc]")
  local out
  out=$("$bin" --config "$tmp/base.yaml" "${args[@]}" --plan 2>&1) || true
  local host_line fits
  host_line=$(grep -m1 '^host ' <<<"$out" | sed -E 's/^host +([0-9.]+ [GM]iB).*/\1/')
  fits=$(grep -m1 '^fits ' <<<"$out" || true)
  local nvme_line
  nvme_line=$(grep -m1 '^nvme ' <<<"$out" | sed -nE 's/.*chunk\.nvme_dir \(([0-9.]+ [GM]iB)\).*/\1/p' || true)
  if [[ "$fits" == *"yes"* && -n "$nvme_line" ]]; then
    echo "yes (host $host_line, NVMe $nvme_line)"
  elif [[ "$fits" == *"yes"* ]]; then
    echo "yes (host $host_line)"
  elif [[ "$fits" == *"NO"* ]]; then
    echo "no: $(sed -E 's/.* is [0-9]+ bytes \(([0-9.]+ [GM]iB)\) short.*/\1 short/' <<<"$fits" | cut -c1-40)"
  else
    echo "error: $(grep -m1 -i error <<<"$out" | cut -c1-80)"
  fi
}

for machine in "24 64" "8 32"; do
  read -r card ram <<<"$machine"
  device=$((card - DEVICE_RESERVE_GIB))
  host=$((ram - HOST_RESERVE_GIB))
  echo
  echo "**${card} GiB card, ${ram} GiB host memory** (budgets: ${device} GiB device, ${host} GiB host)"
  echo
  echo "| model | fp32 moments (exact) | fp32 moments + NVMe tier (exact) | bf16 moments | int8 moments | int8 moments, no fp32 master | LoRA r16, all linear |"
  echo "|---|---|---|---|---|---|---|"
  for model in gpt2-1.5b llama-3.2-1b llama-3.2-3b llama-3.1-8b; do
    row="| $model"
    for mode in fp32 nvme bf16 int8 none lora; do row+=" | $(verdict "$model" "$mode" "$device" "$host")"; done
    echo "$row |"
  done
done
