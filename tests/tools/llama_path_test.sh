#!/usr/bin/env bash
# The README's Llama path ("Llama, Qwen, Mistral, SmolLM2"), run as written for each of
# the four architectures: the lines between its llama-path markers, in a folder where
# models/smollm2-135m is a tiny HF folder of that architecture with its family's
# tokenizer (tests/tools/testdata/llama_path, tools/gen_llama_path_fixture.py) and
# my_text.txt a generated corpus; the training line gets 20 steps with chunks on
# (evicting on the simulated tier) appended. Then: the loss fell; the run's export is a
# folder of the source's architecture with its tokenizer and generation_config.json;
# ps_export wrote the same bytes; ps_sample continued the prompt from the checkpoint and
# reads the bf16 export; an fp32 export computes the very logits the checkpoint does
# (ps_sample --dump-logits on both: byte-identical), not the starting weights' ones.
set -euo pipefail
root="$TEST_SRCDIR/ps_train"
fail() { echo "FAIL ($family): $*" >&2; exit 1; }
family=setup
python3 "$root/tools/make_corpus.py" "$TEST_TMPDIR/corpus" > /dev/null
sed -n '/<!-- llama-path:begin -->/,/<!-- llama-path:end -->/p' "$root/README.md" |
  grep -vE '^(#|```|<!--)' | sed '/^$/d' > "$TEST_TMPDIR/commands.sh"
[ "$(wc -l < "$TEST_TMPDIR/commands.sh")" -eq 4 ] || fail "expected 4 commands in the README block"
extra="--set train.max_steps=20 --set chunk.enabled=true --set chunk.size_elements=20000"
extra+=" --set chunk.device_budget_bytes=200000 --set run.threads=2 --set logging.log_every=1"
extra+=" --set data.seq_len=64 --set train.eval_every=10"
# The stand-in models have random weights: a learning rate that shows a fall in 20 steps.
extra+=" --set optimizer.lr=3e-3 --set lr_schedule.warmup_steps=2"

for family in llama qwen2 qwen3 mistral; do
  work="$TEST_TMPDIR/$family"
  rm -rf "$work"
  mkdir -p "$work/bazel-bin/tools" "$work/bazel-bin/trainer" "$work/models"
  cd "$work"
  for t in ps_prep ps_sample ps_export; do ln -s "$root/tools/$t" "bazel-bin/tools/$t"; done
  ln -s "$root/trainer/ps_train" bazel-bin/trainer/ps_train
  ln -s "$root/tests/tools/testdata/llama_path/$family" models/smollm2-135m
  ln -s "$root/configs" configs
  head -c 300000 "$TEST_TMPDIR/corpus/train.txt" > my_text.txt
  while IFS= read -r line; do
    echo "+ [$family] $line" >&2
    case "$line" in
      *ps_train*) eval "$line $extra" > train.log 2>&1 || { cat train.log; fail "training failed"; } ;;
      *ps_sample*) eval "$line" > sample.txt 2> sample.err || { cat sample.err; fail "ps_sample failed"; } ;;
      *) eval "$line" > cmd.log 2>&1 || { cat cmd.log; fail "failed: $line"; } ;;
    esac
  done < "$TEST_TMPDIR/commands.sh"

  run=runs/finetune-llama
  python3 - "$run/metrics.jsonl" <<'PY' || fail "the loss did not fall"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
losses = [l["loss"] for l in lines if "loss" in l and "step" in l]
evals = [l["eval_loss"] for l in lines if "eval_loss" in l]
print(f"steps {len(losses)}: loss {losses[0]:.3f} -> {losses[-1]:.3f}; eval {evals}")
assert len(losses) == 20 and losses[-1] < losses[0] - 0.3 and evals
PY
  grep -q "chunks:" train.log || fail "the run did not train through chunks"
  for f in config.json model.safetensors tokenizer.json tokenizer_config.json generation_config.json; do
    [ -s "$run/hf/$f" ] || fail "the run's export lacks $f"
    [ -s "my-llama/$f" ] || fail "ps_export's folder lacks $f"
  done
  python3 - models/smollm2-135m/config.json my-llama/config.json <<'PY' || fail "the export's config.json"
import json, sys
src, out = (json.load(open(p)) for p in sys.argv[1:])
assert out["architectures"] == src["architectures"], (out["architectures"], src["architectures"])
assert out["torch_dtype"] == "bfloat16"
for k in ("hidden_size", "num_hidden_layers", "num_key_value_heads", "vocab_size", "tie_word_embeddings"):
    assert out[k] == src[k], k
PY
  cmp -s "$run/hf/model.safetensors" my-llama/model.safetensors || fail "ps_export and checkpoint.export_hf differ"
  [ "$(wc -c < sample.txt)" -gt 20 ] || fail "ps_sample wrote almost nothing: $(cat sample.txt)"

  # The exported folders compute what the checkpoint computes.
  prompt="The old bridge over the river"
  bazel-bin/tools/ps_export --checkpoint "$run/checkpoints" --out fp32 --dtype fp32 > /dev/null 2>&1 ||
    fail "ps_export --dtype fp32"
  bazel-bin/tools/ps_sample --hf my-llama --prompt "$prompt" --dump-logits bf16.st 2> /dev/null ||
    fail "ps_sample cannot read the bf16 export"
  bazel-bin/tools/ps_sample --hf fp32 --prompt "$prompt" --dump-logits fp32.st 2> /dev/null
  bazel-bin/tools/ps_sample --checkpoint "$run/checkpoints" --prompt "$prompt" --dump-logits ckpt.st 2> /dev/null
  cmp -s fp32.st ckpt.st || fail "the fp32 export's logits differ from the checkpoint's"
  bazel-bin/tools/ps_sample --hf models/smollm2-135m --prompt "$prompt" --dump-logits start.st 2> /dev/null
  ! cmp -s fp32.st start.st || fail "the exported weights equal the pretrained ones"
  cd "$root"
  echo "PASS $family: $(head -c 80 "$work/sample.txt")"
done
