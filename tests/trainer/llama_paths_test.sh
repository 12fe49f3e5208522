#!/usr/bin/env bash
# model.type: llama through the real binary on the paths GPT has beyond plain and
# chunked fp32 training (CPU, simulated device tier; a tiny Llama with grouped-query
# attention 4/2, q/k/v biases, q/k norms and an untied head):
# - bf16 chunks track fp32 plain training (5%), fp16 chunks with the loss scaler learn;
# - chunk.cpu_embedding (the untied token embedding looked up on the host) equals the
#   device lookup to 1e-5;
# - the vertical accumulation schedule (with checkpointing) through chunks equals plain horizontal
#   accumulation (1e-6);
# - optimizer.speculation_slots leaves every loss, grad norm and checkpoint tensor
#   bitwise equal;
# - ZeRO over 2 Gloo ranks equals one process at twice the micro-batch (1e-6).
set -euo pipefail
bin="$TEST_SRCDIR/ps_train/trainer/ps_train"
tmp="$TEST_TMPDIR"
python3 -c 'import sys; open(sys.argv[1], "w").write("".join(f"the careful teacher opens window {i % 7}.\\n" for i in range(400)))' \
  "$tmp/corpus.txt"
cat > "$tmp/llama.yaml" <<'YAML'
model: {type: llama, n_layer: 2, n_head: 4, num_key_value_heads: 2, n_embd: 64, intermediate_size: 96,
        n_positions: 64, vocab_size: 256, tie_word_embeddings: false, qkv_bias: true, qk_norm: true}
data: {format: text, seq_len: 32, shuffle: true}
train: {micro_batch_size: 4, global_batch_size: 4, max_steps: 8, eval_steps: 1, grad_clip: 1.0}
optimizer: {lr: 3.0e-3}
run: {threads: 1, device: cpu}
checkpoint: {at_end: false}
distributed: {init_timeout_s: 60, timeout_s: 60}
YAML
chunks=(--set chunk.enabled=true --set chunk.size_elements=20000 --set chunk.device_budget_bytes=200000)
train() {  # train NAME ARGS...: ps_train into $tmp/NAME; prints its log on failure
  local name=$1
  shift
  "$bin" -c "$tmp/llama.yaml" --set run.output_dir="$tmp/$name" --set data.train_path="$tmp/corpus.txt" "$@" > "$tmp/$name.log" 2>&1 ||
    { cat "$tmp/$name.log"; echo "FAILED: $name"; exit 1; }
}
# agree A B TOL: per-step losses (and, with TOL 0, grad norms and checkpoint bytes) of A and B.
agree() {
  python3 - "$tmp/$1" "$tmp/$2" "$3" <<'PY'
import json, os, sys
def steps(d):
    return [(r["step"], r["loss"], r.get("grad_norm")) for r in map(json.loads, open(os.path.join(d, "metrics.jsonl")))
            if "loss" in r and "step" in r]
a, b, tol = steps(sys.argv[1]), steps(sys.argv[2]), float(sys.argv[3])
assert len(a) == len(b) == 8, (len(a), len(b))
for (s, la, ga), (_, lb, gb) in zip(a, b):
    assert abs(la - lb) <= tol * abs(lb), f"step {s}: {la} vs {lb} ({sys.argv[1]} vs {sys.argv[2]})"
    assert tol > 0 or ga == gb, f"step {s}: grad norm {ga} vs {gb}"
if tol == 0:
    def blobs(d):
        ckpt = os.path.join(d, "checkpoints")
        last = os.path.join(ckpt, sorted(os.listdir(ckpt))[-1])
        return {f: open(os.path.join(last, f), "rb").read() for f in ("model.safetensors", "optimizer.safetensors")}
    assert blobs(sys.argv[1]) == blobs(sys.argv[2]), "checkpoint tensors differ"
print(f"agree ({tol}): {os.path.basename(sys.argv[1])} = {os.path.basename(sys.argv[2])}: {[round(x[1], 4) for x in a]}")
PY
}
falls() {  # falls NAME: the last loss is below 0.8 x the first
  python3 -c 'import json,sys; l=[json.loads(x)["loss"] for x in open(sys.argv[1]) if "\"step\"" in x and "\"loss\"" in x]; assert l[-1] < 0.8*l[0], l' \
    "$tmp/$1/metrics.jsonl"
}

echo "== bf16 and fp16 chunks"
train plain
train bf16 "${chunks[@]}" --set precision.dtype=bf16
agree bf16 plain 0.05
train fp16 "${chunks[@]}" --set precision.dtype=fp16
falls fp16

echo "== chunk.cpu_embedding with an untied head"
train chunked "${chunks[@]}"
agree chunked plain 1e-6
train cpu_emb "${chunks[@]}" --set chunk.cpu_embedding=true
agree cpu_emb plain 1e-5

echo "== the vertical schedule through chunks against plain horizontal accumulation"
accum=(--set train.micro_batch_size=2 --set train.global_batch_size=8)
train accum_plain "${accum[@]}"
train accum_vertical "${chunks[@]}" "${accum[@]}" --set train.accumulation_schedule=vertical \
  --set model.activation_checkpointing=true --set chunk.device_budget_bytes=400000
agree accum_vertical accum_plain 1e-6

echo "== speculation (host Adam) leaves every value bitwise equal"
spec=(--set optimizer.hybrid_adam=false --set train.grad_clip=1000 --set checkpoint.at_end=true)
train spec_off "${chunks[@]}" "${spec[@]}"
train spec_on "${chunks[@]}" "${spec[@]}" --set optimizer.speculation_slots=4
agree spec_on spec_off 0
python3 -c 'import json,sys; assert sum(json.loads(l).get("adam_speculated", 0) for l in open(sys.argv[1])) > 0' \
  "$tmp/spec_on/metrics.jsonl" || { echo "FAILED: nothing was speculated"; exit 1; }

echo "== ZeRO over 2 ranks against one process at twice the micro-batch"
zero=(--set chunk.device_budget_bytes=1600000 --set train.global_batch_size=8)  # room for a gathered group
train one8 "${chunks[@]}" "${zero[@]}" --set train.micro_batch_size=8
train zero2 "${chunks[@]}" "${zero[@]}" --set train.micro_batch_size=4 --nproc 2
agree zero2 one8 1e-6
echo "PASS"
