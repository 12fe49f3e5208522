#!/usr/bin/env bash
# The README's "Fine-tune a Llama or Qwen with LoRA on a gaming PC", run as written: the
# lines between its lora-chat-path markers, in a folder where models/llama-3.1-8b-instruct
# is a tiny Llama with the Llama 3 tokenizer and chat template
# (tests/tools/testdata/llama_path/llama_chat) and my_chats.jsonl generated conversations.
# The training line runs on the CPU's simulated device under a traced 3 MB budget (the
# frozen base evicted and fetched back), shortened; ps_sample --chat gets two turns on
# stdin. Then:
#  - the loss fell; the device never went above its budget and the host pool stayed
#    within what --plan counts for the same run (issue #24 §4, the simulated tier);
#  - ps_sample --chat's first prompt is transformers' apply_chat_template(...,
#    add_generation_prompt=True) ids, and it answered each turn;
#  - the adapter and merged exports exist; the adapter merged by ps_sample --adapter
#    computes the checkpoint's logits exactly, and the bf16 merged model within bf16
#    rounding of them.
set -euo pipefail
root="$TEST_SRCDIR/ps_train"
work="$TEST_TMPDIR/lora_chat_path"
rm -rf "$work"
mkdir -p "$work/bazel-bin/tools" "$work/bazel-bin/trainer" "$work/models"
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

for t in ps_prep ps_sample ps_export; do ln -s "$root/tools/$t" "bazel-bin/tools/$t"; done
ln -s "$root/trainer/ps_train" bazel-bin/trainer/ps_train
ln -s "$root/tests/tools/testdata/llama_path/llama_chat" models/llama-3.1-8b-instruct
ln -s "$root/configs" configs
python3 - > my_chats.jsonl <<'PY'
import json, random
r = random.Random(0)
for i in range(200):
    a, b = r.randint(1, 20), r.randint(1, 20)
    m = [{"role": "user", "content": f"What is {a} plus {b}?"},
         {"role": "assistant", "content": f"{a} plus {b} is {a + b}."}]
    if i % 3 == 0:
        m.insert(0, {"role": "system", "content": "You add numbers."})
    print(json.dumps({"messages": m}))
PY

sed -n '/<!-- lora-chat-path:begin -->/,/<!-- lora-chat-path:end -->/p' "$root/README.md" |
  grep -vE '^(#|```|<!--)' | sed '/^$/d' > commands.sh
[ "$(wc -l < commands.sh)" -eq 5 ] || fail "expected 5 commands in the README block, got: $(cat commands.sh)"
# The stand-in: the CPU, short sequences (its max_position_embeddings is 128), a budget
# that makes the chunks move, a learning rate that shows a fall in 30 steps.
small="--set run.device=cpu --set data.seq_len=128 --set train.global_batch_size=4 --set train.micro_batch_size=2"
small+=" --set chunk.size_elements=20000 --set chunk.device_memory_bytes=3000000 --set run.threads=2"
extra="$small --set train.max_steps=30 --set logging.log_every=1 --set optimizer.lr=1e-2"
extra+=" --set lr_schedule.warmup_steps=2 --set train.eval_every=10 --set train.eval_steps=2"
extra+=" --set checkpoint.every_steps=10"
printf 'What is 3 plus 4?\n\nAnd 5 plus 6?\n' > turns.txt
while IFS= read -r line; do
  echo "+ $line" >&2
  case "$line" in
    *ps_train*) eval "$line $extra" > train.log 2>&1 || { cat train.log; fail "training failed"; } ;;
    *ps_sample*)
      eval "$line --temperature 0 --max-new-tokens 8" < turns.txt > chat.txt 2> chat.err ||
        { cat chat.err; fail "ps_sample --chat failed"; } ;;
    *) eval "$line" > cmd.log 2>&1 || { cat cmd.log; fail "failed: $line"; } ;;
  esac
done < commands.sh

run=runs/lora-llama-3.1-8b
[ -s data/chats_train.mask ] && [ -s data/chats_valid.idx ] || fail "ps_prep --format sft wrote no sft files"
grep -q "lora: rank 16 adapters" train.log || fail "the run trained no adapters: $(grep lora train.log)"
bazel-bin/trainer/ps_train --config configs/lora-llama-3.1-8b-8gb.yaml $small --plan > plan.txt 2>&1 ||
  { cat plan.txt; fail "--plan"; }
python3 - "$run/metrics.jsonl" plan.txt <<'PY' || fail "the run's losses or memory"
import json, re, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
steps = [l for l in lines if "loss" in l and "step" in l]
losses = [l["loss"] for l in steps]
print(f"steps {len(losses)}: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
assert len(losses) == 30 and min(losses[-5:]) < losses[0] - 0.2, losses
assert sum(l["evictions"] for l in steps) > 0, "no evictions: the budget did not bind"
assert all(l["budget_overruns"] == 0 for l in steps)
peak_device = max(l["peak_device_total_bytes"] for l in steps)
assert peak_device <= 3000000, f"the device peaked at {peak_device} bytes, above its 3000000"
unit = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
m = re.search(r"^host\s+([0-9.]+) (B|KiB|MiB|GiB) of budget", open(sys.argv[2]).read(), re.M)
assert m, "--plan printed no host line"
planned = float(m.group(1)) * unit[m.group(2)]
used = max(l["peak_host_pool_used_bytes"] for l in steps)
print(f"device peak {peak_device} B of 3000000; host pool peak {used} B, planned {planned:.0f} B")
assert 0 < used <= planned * 1.01 + 4096, (used, planned)  # --plan prints 2 decimals
PY

# The chat: transformers' ids for the first prompt, a reply per turn.
[ "$(wc -l < chat.txt)" -eq 2 ] || fail "expected 2 replies, got: $(cat chat.txt)"
grep -q "2 replies" chat.err || fail "ps_sample --chat: $(cat chat.err)"
bazel-bin/tools/ps_sample --hf models/llama-3.1-8b-instruct --chat --system "You add numbers." --print-ids \
  --max-new-tokens 1 < <(echo "What is 3 plus 4?") > ids.txt 2> /dev/null || fail "ps_sample --chat --print-ids"
# apply_chat_template([system, user], add_generation_prompt=True, tokenize=True) with transformers 5.
expected="0 704 540 670 71 79 705 201 201 37 87 86 86 571 223 45 80 299 78 288 314 223 38 309 71 28 223 38 71 596"
expected+=" 359 261 223 694 20 21 201 54 81 70 67 91 223 38 309 71 28 223 20 24 223 44 87 78 223 694 20 22 201 201"
expected+=" 59 287 274 70 70 326 87 359 346 16 2 704 87 85 261 705 201 201 57 74 309 331 223 21 286 78 87 85 223"
expected+=" 22 33 2 704 67 417 513 86 705 201 201"
[ "$(head -1 ids.txt)" = "$expected" ] || fail "the chat prompt's ids: $(head -1 ids.txt)"

# The exports.
for f in adapter_config.json adapter_model.safetensors tokenizer_config.json; do
  [ -s "my-adapter/$f" ] || fail "ps_export's adapter folder lacks $f"
done
grep -q '"base_model_name_or_path": "meta-llama/Llama-3.1-8B-Instruct"' my-adapter/adapter_config.json ||
  fail "the adapter names another base: $(grep base_model my-adapter/adapter_config.json)"
[ -s my-merged/config.json ] && [ -s my-merged/model.safetensors ] || fail "ps_export --merge wrote no model"
prompt="What is 3 plus 4?"
bazel-bin/tools/ps_sample --checkpoint "$run/checkpoints" --prompt "$prompt" --dump-logits ckpt.st 2> /dev/null
bazel-bin/tools/ps_sample --hf models/llama-3.1-8b-instruct --adapter my-adapter --prompt "$prompt" \
  --dump-logits adapter.st 2> /dev/null || fail "ps_sample --adapter"
cmp -s adapter.st ckpt.st || fail "ps_sample --adapter's logits differ from the checkpoint's"
bazel-bin/tools/ps_sample --adapter "$run/hf" --prompt "$prompt" --dump-logits at_end.st 2> /dev/null ||
  fail "ps_sample --adapter without --hf (its base_model_name_or_path)"
cmp -s at_end.st ckpt.st || fail "checkpoint.export_hf's adapter computes other logits"
bazel-bin/tools/ps_sample --hf models/llama-3.1-8b-instruct --prompt "$prompt" --dump-logits base.st 2> /dev/null
! cmp -s base.st ckpt.st || fail "the adapter changes nothing"
bazel-bin/tools/ps_sample --hf my-merged --prompt "$prompt" --dump-logits merged.st 2> /dev/null
python3 - ckpt.st merged.st base.st <<'PY' || fail "the merged model's logits"
import array, json, struct, sys
def logits(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    meta = json.loads(raw[8:8 + n])["logits"]
    assert meta["dtype"] == "F32"
    a = array.array("f"); a.frombytes(raw[8 + n + meta["data_offsets"][0]:8 + n + meta["data_offsets"][1]])
    return a
ckpt, merged, base = (logits(p) for p in sys.argv[1:])
d_merged = max(abs(x - y) for x, y in zip(ckpt, merged))
d_base = max(abs(x - y) for x, y in zip(ckpt, base))
print(f"max |logit difference|: merged bf16 {d_merged:.2e}, base {d_base:.2e}")
assert d_merged < 0.1 * d_base, (d_merged, d_base)
PY
echo "PASS: $(head -c 80 chat.txt)"
