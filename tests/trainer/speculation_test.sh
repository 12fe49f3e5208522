#!/usr/bin/env bash
# optimizer.speculation_slots through the real binary (CPU, simulated device tier, all
# chunks updated on the host): host chunks are updated as soon as their gradients are
# final in backward, assuming no clipping; the runs must equal the runs without it bit
# for bit (every logged loss and grad norm, and the checkpointed masters and Adam
# moments), whether the speculation stands (no clipping), is rolled back and redone
# (clipping every step), with gradient accumulation (fp32 grad chunks; horizontal and
# vertical), bf16 (gradients
# in the compute slots) and ZeRO over 2 ranks (the reduction's output); and with the host
# Adam threads pinned to cores; and the CUDA paths of the optimizer (chunks to the host
# and back, staged parameters) on the simulated tier. docs/optim.md.
set -euo pipefail
bin="$TEST_SRCDIR/ps_train/trainer/ps_train"
tmp="$TEST_TMPDIR"
cat > "$tmp/tiny.yaml" <<'YAML'
model: {n_layer: 2, n_head: 2, n_embd: 64, n_positions: 64, vocab_size: 256, dropout: 0.0}
data: {format: synthetic, seq_len: 64}
train: {micro_batch_size: 4, global_batch_size: 4, max_steps: 5, eval_steps: 1}
run: {threads: 2, device: cpu}
optimizer: {hybrid_adam: false}
checkpoint: {at_end: true}
chunk: {enabled: true, size_elements: 20000}
distributed: {init_timeout_s: 60, timeout_s: 60}
YAML
run() {  # run NAME ARGS...
  local name=$1
  shift
  "$bin" -c "$tmp/tiny.yaml" --set run.output_dir="$tmp/$name" "$@" > "$tmp/$name.log" 2>&1 ||
    { cat "$tmp/$name.log"; echo "FAILED: $name"; exit 1; }
}
# same A B: losses, grad norms and the final checkpoint's tensors are bitwise equal.
same() {
  python3 - "$tmp/$1" "$tmp/$2" <<'PY'
import json, os, struct, sys
def steps(d):
    return [(r["step"], r["loss"], r["grad_norm"]) for r in map(json.loads, open(os.path.join(d, "metrics.jsonl")))
            if "loss" in r and "grad_norm" in r]
a, b = steps(sys.argv[1]), steps(sys.argv[2])
assert a and a == b, f"{sys.argv[1]} vs {sys.argv[2]}:\n{a}\n{b}"
def tensors(d):
    ckpt = os.path.join(d, "checkpoints")
    last = sorted(os.listdir(ckpt), key=lambda s: int(s.split("_")[-1]) if s.split("_")[-1].isdigit() else -1)[-1]
    out = {}
    folder = os.path.join(ckpt, last)
    for f in sorted(os.listdir(folder)):
        if not f.endswith(".safetensors") or f.startswith("rng"):
            continue
        with open(os.path.join(folder, f), "rb") as h:
            n = struct.unpack("<Q", h.read(8))[0]
            header = json.loads(h.read(n))
            data = h.read()
        for k, v in header.items():
            if k != "__metadata__":
                s, e = v["data_offsets"]
                out[f + ":" + k] = data[s:e]
    return out
ta, tb = tensors(sys.argv[1]), tensors(sys.argv[2])
assert ta and ta.keys() == tb.keys(), sorted(set(ta) ^ set(tb))
diff = [k for k in ta if ta[k] != tb[k]]
assert not diff, f"tensors differ: {diff[:5]}"
print(f"bitwise equal: {os.path.basename(sys.argv[1])} = {os.path.basename(sys.argv[2])}: {len(a)} steps, {len(ta)} tensors")
PY
}
total() {  # total NAME KEY: sum of KEY over the step lines
  python3 -c 'import json,sys; print(sum(json.loads(l).get(sys.argv[2], 0) for l in open(sys.argv[1]) if "\"step\"" in l))' \
    "$tmp/$1/metrics.jsonl" "$2"
}
check() {  # check NAME SLOTS ARGS...: NAME with and without speculation; prints kept and rolled back
  local name=$1 slots=$2
  shift 2
  run "${name}_off" "$@"
  run "${name}_on" "$@" --set optimizer.speculation_slots="$slots"
  same "${name}_on" "${name}_off"
  echo "$name: speculated $(total "${name}_on" adam_speculated), rolled back $(total "${name}_on" adam_rolled_back)"
}

echo "== fp32, no clipping in reach: the speculation stands"
check keep 8 --set train.grad_clip=1000
[ "$(total keep_on adam_speculated)" -gt 0 ] && [ "$(total keep_on adam_rolled_back)" -eq 0 ]
[ "$(total keep_off adam_speculated)" -eq 0 ]

echo "== fp32, clipping every step: rolled back and redone"
check clip 8 --set train.grad_clip=0.01 --set optimizer.speculation_backoff_steps=0
[ "$(total clip_on adam_rolled_back)" -eq 40 ] && [ "$(total clip_on adam_speculated)" -eq 0 ]

echo "== fp32, clipping every step, backing off 3 steps after a rollback: steps 1 and 5 speculate"
check backoff 8 --set train.grad_clip=0.01 --set optimizer.speculation_backoff_steps=3
[ "$(total backoff_on adam_rolled_back)" -eq 16 ] || { echo "FAILED: expected 2 steps x 8 chunks rolled back"; exit 1; }

echo "== bf16 (gradients in the compute slots), one slot: part ahead, the rest at the end"
check bf16 1 --set precision.dtype=bf16 --set train.grad_clip=1000
[ "$(total bf16_on adam_speculated)" -eq 5 ] || { echo "FAILED: one slot is one chunk per step"; exit 1; }

echo "== the CUDA paths on the simulated tier (chunk.simulate_device_copies): bf16, chunks come to the host"
check simcopy 8 --set precision.dtype=bf16 --set train.grad_clip=1000 --set chunk.simulate_device_copies=true \
  --set chunk.async_prefetch=true
[ "$(total simcopy_on adam_speculated)" -gt 0 ]
same simcopy_off bf16_off  # the copies change no value
# The optimizer took chunks to the host and back (counted as evictions) only with the key.
[ "$(total simcopy_off evictions)" -gt "$(total bf16_off evictions)" ] ||
  { echo "FAILED: simulate_device_copies moved no chunk"; exit 1; }

echo "== the CUDA paths with accumulation in bf16: parameters staged, compute chunks stay on the device"
run accbf16 --set precision.dtype=bf16 --set train.micro_batch_size=2 --set train.grad_clip=1000
check staged 8 --set precision.dtype=bf16 --set train.micro_batch_size=2 --set train.grad_clip=1000 \
  --set chunk.simulate_device_copies=true --set chunk.async_prefetch=true
[ "$(total staged_on adam_speculated)" -gt 0 ]
same staged_off accbf16
# Staged: parameters copied into the device chunks (more host-to-device bytes), no chunk moved out.
[ "$(total staged_off h2d_bytes)" -gt "$(total accbf16 h2d_bytes)" ] &&
  [ "$(total staged_off evictions)" -eq "$(total accbf16 evictions)" ] ||
  { echo "FAILED: the staged path did not run (or moved chunks)"; exit 1; }

echo "== accumulation (fp32 gradient chunks, flushed from device slots under a budget)"
check accum 8 --set train.micro_batch_size=2 --set chunk.device_budget_bytes=1500000 --set train.grad_clip=1000
[ "$(total accum_on adam_speculated)" -gt 0 ]

echo "== vertical accumulation (one block-major backward): chunks final when backward moves below them"
check vertical 8 --set train.micro_batch_size=2 --set chunk.device_budget_bytes=1500000 --set train.grad_clip=1000 \
  --set train.accumulation_schedule=vertical --set model.activation_checkpointing=true
[ "$(total vertical_on adam_speculated)" -gt 0 ]
check vertclip 8 --set train.micro_batch_size=2 --set chunk.device_budget_bytes=1500000 --set train.grad_clip=0.01 \
  --set optimizer.speculation_backoff_steps=0 --set train.accumulation_schedule=vertical \
  --set model.activation_checkpointing=true
[ "$(total vertclip_on adam_rolled_back)" -gt 0 ]

echo "== ZeRO, 2 ranks: each rank's reduced chunks"
check zero 8 --nproc 2 --set train.micro_batch_size=2 --set train.grad_clip=1000
[ "$(total zero_on adam_speculated)" -gt 0 ]

echo "== host Adam threads pinned, one per physical core (optimizer.pin_cpu_threads): the same bits"
run pinned --set train.grad_clip=1000 --set optimizer.speculation_slots=8 --set optimizer.pin_cpu_threads=true
line=$(grep -o "host Adam: [0-9]* threads pinned to CPUs [0-9,]*" "$tmp/pinned.log") ||
  { cat "$tmp/pinned.log"; echo "FAILED: no pinning line"; exit 1; }
echo "$line"
# The norm's partial sums depend on the thread count, which pinning caps at the physical
# cores: bitwise equality holds where that cap leaves the 2 threads (2 cores).
if [ "$(echo "$line" | awk '{print $3}')" -eq 2 ]; then same pinned keep_on; fi

echo "== ZeRO, 2 ranks, bf16 with accumulation on the CUDA paths: owned chunks staged"
check zerosim 8 --nproc 2 --set precision.dtype=bf16 --set train.micro_batch_size=1 --set train.grad_clip=1000 \
  --set chunk.simulate_device_copies=true --set chunk.async_prefetch=true
[ "$(total zerosim_on adam_speculated)" -gt 0 ]

echo "== --plan counts the backups on the host"
base=$("$bin" -c "$tmp/tiny.yaml" --plan | grep '^host ')
more=$("$bin" -c "$tmp/tiny.yaml" --plan --set optimizer.speculation_slots=8 | grep '^host ')
echo "without: $base"
echo "with 8 slots: $more"
[ "$base" != "$more" ] || { echo "FAILED: the plan does not count the backups"; exit 1; }
echo PASS
