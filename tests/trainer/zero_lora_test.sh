#!/usr/bin/env bash
# LoRA over ZeRO ranks (docs/chunkmem.md "Frozen chunks", F6): the frozen base's chunks are
# sharded, gathered with their groups and never reduced; the adapters' chunks are sharded
# like any trainable chunk (each rank updates the adapters of the chunks it owns). Through
# the real binary on Gloo (CPU, simulated device tier), GPT-2 shape with adapters on c_attn:
#  - 2 ranks at micro-batch b give one process's losses at 2b (fp32: 1e-6 relative), also
#    evicting under a device budget with accumulation, and in bf16 without accumulation
#    (the reduced gradients overwrite the owned compute slots: never a frozen chunk's);
#  - the adapter folder checkpoint.export_hf writes (gathered from both ranks) equals one
#    process's;
#  - a 2-rank checkpoint holds the adapters (sharded) and the base's fingerprint, which is
#    the same as one process's; it resumes on 1 rank with the uninterrupted losses, and is
#    refused over another base naming both fingerprints.
set -euo pipefail
source "$TEST_SRCDIR/ps_train/tests/trainer/zero_lib.sh"  # $bin, $tmp, tiny.yaml, run, compare, summary, metric
cat >> "$tmp/tiny.yaml" <<'YAML'
lora: {enabled: true, r: 4, alpha: 8}
optimizer: {lr: 1.0e-2}
YAML

echo "== fp32: 2 ranks match one process at 2x the micro-batch; the exported adapters agree"
run one4 --set train.micro_batch_size=4 --set checkpoint.export_hf=true --set checkpoint.every_steps=3
run zero2 --nproc 2 --set checkpoint.export_hf=true --set checkpoint.every_steps=3
grep -q "lora: rank 4 adapters" "$tmp/zero2.log"
compare zero2 one4 1e-6
[ "$(metric zero2 group_gathers)" -gt 0 ] && [ "$(metric zero2 group_reductions)" -gt 0 ]
python3 - "$tmp/one4/hf/adapter_model.safetensors" "$tmp/zero2/hf/adapter_model.safetensors" <<'PY'
import array, json, struct, sys
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    out = {}
    for k, meta in json.loads(raw[8:8 + n]).items():
        if k == "__metadata__":
            continue
        assert meta["dtype"] == "F32", meta
        a = array.array("f")
        a.frombytes(raw[8 + n + meta["data_offsets"][0]:8 + n + meta["data_offsets"][1]])
        out[k] = a
    return out
one, two = (tensors(p) for p in sys.argv[1:])
assert one.keys() == two.keys() and one, sorted(one.keys() ^ two.keys())
worst = max(abs(x - y) / (abs(y) + 1e-3) for k in one for x, y in zip(one[k], two[k]))
assert any(max(map(abs, one[k])) > 0 for k in one if "lora_B" in k), "the adapters did not train"
print(f"{len(one)} adapter tensors, largest relative difference {worst:.2e}")
assert worst < 1e-3, worst
PY
for ckpt in "$tmp/one4/checkpoints/step_3" "$tmp/zero2/checkpoints/step_3"; do
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]+"/state.json"))["engine"]["frozen_fingerprint"])' \
    "$ckpt" >> "$tmp/fingerprints.txt"
done
[ "$(sort -u "$tmp/fingerprints.txt" | wc -l)" -eq 1 ] ||
  { cat "$tmp/fingerprints.txt"; echo "FAILED: 2 ranks fingerprint the base differently from one process"; exit 1; }
[ -f "$tmp/zero2/checkpoints/step_3/model.rank1.safetensors" ] || { echo "FAILED: the checkpoint is not sharded"; exit 1; }

echo "== resumed on 1 rank: the uninterrupted losses; over another base: refused"
run resume1 --set train.micro_batch_size=4 --set checkpoint.resume="$tmp/zero2/checkpoints/step_3"
compare resume1 zero2 1e-6 4
if "$bin" -c "$tmp/tiny.yaml" --set run.output_dir="$tmp/other" --nproc 2 --set run.seed=7 \
    --set checkpoint.resume="$tmp/zero2/checkpoints/step_3" > "$tmp/other.log" 2>&1; then
  echo "FAILED: resumed over another base"; exit 1
fi
grep -q "saved over a frozen base of fingerprint $(head -1 "$tmp/fingerprints.txt")" "$tmp/other.log" ||
  { cat "$tmp/other.log"; echo "FAILED: the refusal does not name the fingerprints"; exit 1; }

echo "== evicting under a device budget, with gradient accumulation"
budget=(--set chunk.device_budget_bytes=2600000 --set train.global_batch_size=16 --set model.n_layer=24)
run one_acc "${budget[@]}" --set train.micro_batch_size=4
run zero_acc "${budget[@]}" --nproc 2
compare zero_acc one_acc 1e-6
[ "$(metric zero_acc evictions)" -gt 0 ] || { echo "FAILED: the budget evicted nothing"; exit 1; }

echo "== bf16 without accumulation: reduced gradients in the owned compute slots"
run one_bf16 --set precision.dtype=bf16 --set train.micro_batch_size=8
run zero_bf16 --set precision.dtype=bf16 --set train.micro_batch_size=4 --nproc 2
compare zero_bf16 one_bf16 1e-4
echo PASS
