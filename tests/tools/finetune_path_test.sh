#!/usr/bin/env bash
# The README's "Fine-tune GPT-2 on your own text", run as written: the lines between its
# finetune-path markers, in a folder where models/gpt2 is the tiny HF fixture
# (tests/models/testdata/gpt2_tiny_hf) and my_text.txt a generated corpus; the training
# line gets 20 steps with chunks on (evicting on the simulated tier) appended. Then: the
# loss fell, the run exported an HF folder, ps_export wrote the same weights, ps_sample
# continued the prompt, and the exported folder computes the very logits the checkpoint
# does (ps_sample --dump-logits on both: byte-identical).
set -euo pipefail
root="$TEST_SRCDIR/ps_train"
work="$TEST_TMPDIR/finetune_path"
rm -rf "$work"
mkdir -p "$work/bazel-bin/tools" "$work/bazel-bin/trainer" "$work/models"
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

for t in ps_prep ps_sample ps_export; do ln -s "$root/tools/$t" "bazel-bin/tools/$t"; done
ln -s "$root/trainer/ps_train" bazel-bin/trainer/ps_train
ln -s "$root/tests/models/testdata/gpt2_tiny_hf" models/gpt2
ln -s "$root/configs" configs
python3 "$root/tools/make_corpus.py" corpus > /dev/null
head -c 400000 corpus/train.txt > my_text.txt

sed -n '/<!-- finetune-path:begin -->/,/<!-- finetune-path:end -->/p' "$root/README.md" |
  grep -vE '^(#|```|<!--)' | sed '/^$/d' > commands.sh
[ "$(wc -l < commands.sh)" -eq 4 ] || fail "expected 4 commands in the README block, got: $(cat commands.sh)"
extra="--set train.max_steps=20 --set chunk.enabled=true --set chunk.size_elements=20000"
extra+=" --set chunk.device_budget_bytes=600000 --set run.threads=2 --set logging.log_every=1"
# The stand-in model has random weights: a learning rate that shows a fall in 20 steps.
extra+=" --set optimizer.lr=3e-3 --set lr_schedule.warmup_steps=2"
while IFS= read -r line; do
  echo "+ $line" >&2
  case "$line" in
    *ps_train*) eval "$line $extra" > train.log 2>&1 || { cat train.log; fail "training failed"; } ;;
    *ps_sample*) eval "$line" > sample.txt 2> sample.err || { cat sample.err; fail "ps_sample failed"; } ;;
    *) eval "$line" > /dev/null 2>&1 || fail "failed: $line" ;;
  esac
done < commands.sh

run=runs/finetune-gpt2-124m
[ -s data/my_text_train.bin ] && [ -s data/my_text_valid.idx ] || fail "ps_prep wrote no megatron files"
python3 - "$run/metrics.jsonl" <<'PY' || fail "the loss did not fall"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
losses = [l["loss"] for l in lines if "loss" in l and "step" in l]
evals = [l["eval_loss"] for l in lines if "eval_loss" in l]
print(f"steps {len(losses)}: loss {losses[0]:.3f} -> {losses[-1]:.3f}; eval {evals}")
assert len(losses) >= 2 and losses[-1] < losses[0] - 0.3 and evals
PY
grep -q "chunks:" train.log || fail "the run did not train through chunks"
for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
  [ -s "$run/hf/$f" ] || fail "the run's export lacks $f"
  [ -s "my-gpt2/$f" ] || fail "ps_export's folder lacks $f"
done
cmp -s "$run/hf/model.safetensors" my-gpt2/model.safetensors || fail "ps_export and checkpoint.export_hf differ"
rc=0
bazel-bin/tools/ps_export --checkpoint "$run/checkpoints" --out tiny-shards --max-shard-bytes 0 2> err.txt || rc=$?
[ "$rc" -eq 2 ] && grep -q -- "--max-shard-bytes 0: must be at least 1 MiB" err.txt && [ ! -e tiny-shards ] ||
  fail "--max-shard-bytes 0: rc $rc, $(cat err.txt)"
grep -q '^The old bridge' sample.txt || fail "ps_sample did not continue the prompt: $(cat sample.txt)"
[ "$(wc -c < sample.txt)" -gt 20 ] || fail "ps_sample wrote almost nothing: $(cat sample.txt)"

# The exported folder computes what the checkpoint computes.
bazel-bin/tools/ps_sample --hf my-gpt2 --prompt "The old bridge over the river" --dump-logits hf.st 2> /dev/null
bazel-bin/tools/ps_sample --checkpoint "$run/checkpoints" --prompt "The old bridge over the river" \
  --dump-logits ckpt.st 2> /dev/null
cmp -s hf.st ckpt.st || fail "the exported weights' logits differ from the checkpoint's"
# ... and not what the starting weights compute (the fine-tune changed the model).
bazel-bin/tools/ps_sample --hf models/gpt2 --prompt "The old bridge over the river" --dump-logits start.st 2> /dev/null
! cmp -s hf.st start.st || fail "the exported weights equal the pretrained ones"
echo "PASS: $(cat sample.txt | head -c 120)"
