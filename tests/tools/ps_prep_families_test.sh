#!/usr/bin/env bash
# ps_prep with the Llama-family fixture tokenizers (tests/tokenizer/testdata/llama3: BOS by
# TemplateProcessing, eos_token <|end_of_text|> in tokenizer_config.json; spm_metaspace:
# Mistral-style, add_bos_token and add_eos_token): --print-ids gives HF's ids (golden ids
# of tools/gen_family_tokenizers.py), and the .bin holds BOS + ids + one EOS per document;
# an unsupported pre-tokenizer is exit 2 naming file and field, nothing written.
set -euo pipefail
prep="$TEST_SRCDIR/ps_train/tools/ps_prep"
data="$TEST_SRCDIR/ps_train/tests/tokenizer/testdata"
work="$TEST_TMPDIR/ps_prep_families"
mkdir -p "$work"
cd "$work"

fail() { echo "FAIL: $*" >&2; exit 1; }

printf 'Hello world\nThe river watches the old bridge, number 12345.\nCafé 東京 😀\n' > a.txt

# name | HF ids of "Hello world" (add_special_tokens=False) | BOS | EOS
for row in "llama3|42 71 285 81 277 269 281|0|1" "spm_metaspace|364 291 305 405 315 398 389 401|1|2"; do
  IFS='|' read -r name hello bos eos <<< "$row"
  tok="$data/$name"
  got=$(echo "Hello world" | "$prep" --tokenizer "$tok" --print-ids)
  [ "$got" = "$hello" ] || fail "$name: --print-ids gave '$got', HF gives '$hello'"
  "$prep" --tokenizer "$tok" --input a.txt --text-split line --valid-fraction 0 --threads 2 \
    --output-prefix "out/$name" > summary.txt || fail "$name: ps_prep failed: $(cat summary.txt)"
  "$prep" --tokenizer "$tok" --print-ids < a.txt | sed "s/^/$bos /; s/\$/ $eos/" | tr ' ' '\n' > expected.txt
  od -An -v -tu2 "out/${name}_train.bin" | tr -s ' ' '\n' | sed '/^$/d' > got.txt
  cmp -s expected.txt got.txt || fail "$name: .bin is not BOS + --print-ids + EOS per document"
done

# A tokenizer.json with an unsupported pre-tokenizer: exit 2 naming the file and the field,
# nothing written.
mkdir -p badtok
sed 's/"type": *"Split"/"type":"WhitespaceSplit"/' "$data/llama3/tokenizer.json" > badtok/tokenizer.json
grep -q WhitespaceSplit badtok/tokenizer.json || fail "could not make the bad tokenizer.json"
rc=0
"$prep" --tokenizer badtok --input a.txt --output-prefix out/bad 2> err.txt > /dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "unsupported pre_tokenizer: exit status $rc, expected 2: $(cat err.txt)"
grep -q "badtok/tokenizer.json: unsupported pre_tokenizer 'WhitespaceSplit' at pre_tokenizer.pretokenizers\[0\]" err.txt \
  || fail "the error does not name the file and field: $(cat err.txt)"
! ls out/bad* > /dev/null 2>&1 || fail "files written for a bad tokenizer: $(ls out)"
echo PASS
