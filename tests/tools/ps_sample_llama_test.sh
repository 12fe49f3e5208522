#!/usr/bin/env bash
# ps_sample with Llama-family models: an HF folder (the Mistral fixture: sliding window 8,
# 30 new tokens) gives the same greedy ids with its KV cache as with --no-cache, and
# prints prefill and decode tokens/s; the eos ids of generation_config.json (a list)
# stop it; a ps_train checkpoint of model.type llama started from that folder (lr 0, so
# the same weights) gives the same ids as the folder. A 13-word WordPiece vocabulary
# stands in for the tokenizer (--print-ids: the new ids are not decoded).
set -euo pipefail
root="$TEST_SRCDIR/ps_train"
sample="$root/tools/ps_sample"
fixture="$root/tests/models/testdata/llama_family/mistral"
cd "$TEST_TMPDIR"
fail() { echo "FAIL: $*" >&2; exit 1; }

printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nsat\non\nmat\na\nb\nc\n' > vocab.txt
args=(--tokenizer vocab.txt --prompt "the cat sat on the mat" --temperature 0 --max-new-tokens 30 --print-ids)
"$sample" --hf "$fixture" "${args[@]}" --ignore-eos > cached.txt 2> cached.err || fail "$(cat cached.err)"
"$sample" --hf "$fixture" "${args[@]}" --ignore-eos --no-cache > full.txt 2> full.err || fail "$(cat full.err)"
[ "$(sed -n 1p cached.txt)" = "5 6 7 8 5 9" ] || fail "prompt ids: $(sed -n 1p cached.txt)"
[ "$(sed -n 2p cached.txt | wc -w)" -eq 30 ] || fail "expected 30 new ids: $(cat cached.txt)"
cmp -s cached.txt full.txt || fail "the KV cache changed the greedy ids: $(cat cached.txt) vs $(cat full.txt)"
grep -qE "KV cache: prefill 6 tokens in .* tokens/s\), decode 29 tokens in .* tokens/s\)" cached.err ||
  fail "no prefill/decode summary: $(cat cached.err)"
grep -q "no cache: prefill" full.err || fail "no summary without the cache: $(cat full.err)"

# generation_config.json's eos_token_id as a list: [an id never generated, the first new
# id that did not come before it]; [SEP] (id 3, the tokenizer's end of text) stops too.
read -r stop expected < <(python3 - "$(sed -n 2p cached.txt)" <<'PY'
import sys
ids = [int(x) for x in sys.argv[1].split()]
k = next(i for i in range(1, len(ids)) if ids[i] not in ids[:i] and ids[i] != 3)
stop_at = next(i for i in range(len(ids)) if i == k or ids[i] == 3)
print(ids[k], ",".join(map(str, ids[:stop_at + 1])))
PY
)
mkdir -p eos_folder
cp "$fixture"/config.json "$fixture"/model.safetensors eos_folder/
never=$(python3 -c "import sys; print(next(i for i in range(64) if str(i) not in sys.argv[1].split()))" "$(sed -n 2p cached.txt)")
echo "{\"eos_token_id\": [$never, $stop]}" > eos_folder/generation_config.json
"$sample" --hf eos_folder "${args[@]}" > eos.txt 2> eos.err || fail "$(cat eos.err)"
[ "$(sed -n 2p eos.txt | tr ' ' ',')" = "$expected" ] || fail "eos [$never, $stop]: got $(sed -n 2p eos.txt), want $expected"
grep -q "stopped at an eos token" eos.err || fail "no stop reported: $(cat eos.err)"

# A model.type llama checkpoint of the same weights.
cat > llama.yaml <<YAML
run: {name: tiny-llama, output_dir: runs/tiny-llama}
model: {type: llama, init_from: $fixture}
data: {format: synthetic, seq_len: 16}
train: {micro_batch_size: 2, global_batch_size: 2, max_steps: 1}
optimizer: {type: adamw, lr: 0.0}
lr_schedule: {type: constant}
YAML
"$root/trainer/ps_train" --config llama.yaml > train.log 2>&1 || { cat train.log; fail "ps_train failed"; }
"$sample" --checkpoint runs/tiny-llama/checkpoints "${args[@]}" --ignore-eos > ckpt.txt 2> ckpt.err || fail "$(cat ckpt.err)"
cmp -s ckpt.txt cached.txt || fail "the checkpoint samples $(cat ckpt.txt), the folder $(cat cached.txt)"
echo "ps_sample llama test passed"
