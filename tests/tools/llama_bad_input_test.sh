#!/usr/bin/env bash
# Bad Llama-family input through the real programs: a folder of an unsupported
# architecture, a missing shard, a shard whose tensor has the wrong shape or dtype
# (ps_train, model.init_from), a tokenizer.json of an unsupported model type or
# pre-tokenizer (ps_prep): each exits 2 with a message naming the file and the field or
# tensor, and writes nothing (no run folder, no output files).
set -euo pipefail
root="$TEST_SRCDIR/ps_train"
tmp="$TEST_TMPDIR"
cd "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }
path="$root/tests/tools/testdata/llama_path"
sharded="$root/tests/models/testdata/llama_family/qwen3"  # three shards and an index

# expect STATUS LOG NEEDLE...: STATUS is 2 and LOG names each NEEDLE.
expect() {
  local status=$1 log=$2
  shift 2
  [ "$status" -eq 2 ] || { cat "$log"; fail "exit status $status, expected 2"; }
  for needle in "$@"; do grep -qF -- "$needle" "$log" || { cat "$log"; fail "the message lacks '$needle'"; }; done
  echo "ok: $(head -1 "$log")"
}
train() {  # train NAME FOLDER: a one-step fine-tune of FOLDER into out_NAME
  set +e
  "$root/trainer/ps_train" -c /dev/stdin --set model.init_from="$2" --set run.output_dir="out_$1" > "$1.log" 2>&1 <<'YAML'
model: {type: llama}
data: {format: synthetic, seq_len: 16}
train: {micro_batch_size: 1, global_batch_size: 1, max_steps: 1}
YAML
  local status=$?
  set -e
  [ ! -e "out_$1" ] || fail "$1: the run folder was written"
  return $status
}
# edit_header SRC DST PY: DST is SRC with its safetensors header passed through PY (h: dict).
edit_header() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, struct, sys
src, dst, code = sys.argv[1:]
data = open(src, "rb").read()
n = struct.unpack("<Q", data[:8])[0]
h = json.loads(data[8:8 + n])
exec(code)
head = json.dumps(h).encode()
head += b" " * (-len(head) % 8)
open(dst, "wb").write(struct.pack("<Q", len(head)) + head + data[8 + n:])
PY
}

# Every edited folder is a dereferenced copy (cp -L): runfiles are links to the committed
# fixtures, which an edit through a link would change.
echo "== an architecture outside the family"
cp -rL "$path/llama" arch
sed -i 's/"LlamaForCausalLM"/"GemmaForCausalLM"/' arch/config.json
status=0; train arch arch || status=$?
expect $status arch.log "arch/config.json" "field architectures" "GemmaForCausalLM"

echo "== a shard the index lists is missing"
cp -rL "$sharded" noshard
rm noshard/model-00002-of-00003.safetensors
status=0; train noshard noshard || status=$?
expect $status noshard.log "model-00002-of-00003.safetensors"

echo "== a tensor of the wrong shape"
cp -rL "$path/llama" shape
edit_header "$path/llama/model.safetensors" shape/model.safetensors \
  'h["model.norm.weight"]["shape"] = [h["model.norm.weight"]["shape"][0] // 2, 2]'
status=0; train shape shape || status=$?
expect $status shape.log "shape/model.safetensors" "model.norm.weight" "shape"

echo "== a tensor of a dtype that is not floating point"
cp -rL "$path/mistral" dtype  # fp32: I32 has the same size
edit_header "$path/mistral/model.safetensors" dtype/model.safetensors 'h["model.norm.weight"]["dtype"] = "I32"'
status=0; train dtype dtype || status=$?
expect $status dtype.log "dtype/model.safetensors" "model.norm.weight"

echo "== tokenizer.json of an unsupported model type, and pre-tokenizer"
printf 'one paragraph.\n\nanother one.\n' > text.txt
for what in model pre; do
  mkdir -p "tok_$what"
  python3 - "$path/llama/tokenizer.json" "tok_$what/tokenizer.json" "$what" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
if sys.argv[3] == "model":
    j["model"]["type"] = "Unigram"
else:
    j["pre_tokenizer"] = {"type": "BertPreTokenizer"}
json.dump(j, open(sys.argv[2], "w"))
PY
  set +e
  "$root/tools/ps_prep" --tokenizer "tok_$what" --input text.txt --output-prefix "prep_$what/out" > "prep_$what.log" 2>&1
  status=$?
  set -e
  [ -z "$(ls "prep_$what" 2>/dev/null)" ] || fail "ps_prep wrote $(ls "prep_$what")"
  expect $status "prep_$what.log" "tok_$what/tokenizer.json" "$([ $what = model ] && echo Unigram || echo BertPreTokenizer)"
done
echo PASS
