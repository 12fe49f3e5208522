#!/usr/bin/env bash
# ps_prep end to end with the BPE fixture tokenizer (tests/tokenizer/testdata/bpe): the
# tokens in the Megatron .bin and the llm.c shard equal --print-ids of the same text plus
# the end-of-text id per document; the split is exact and seeded; bad input stops naming
# file:line (and leaves no output) or is skipped and counted; ps_train trains on the output.
set -euo pipefail
prep="$TEST_SRCDIR/ps_train/tools/ps_prep"
train="$TEST_SRCDIR/ps_train/trainer/ps_train"
tok="$TEST_SRCDIR/ps_train/tests/tools/testdata/bpe_tokenizer.json"
work="$TEST_TMPDIR/ps_prep"
mkdir -p "$work"
cd "$work"

fail() { echo "FAIL: $*" >&2; exit 1; }

# The corpus: 60 lines of text (blank lines between groups of three), and JSONL with the
# same kind of sentences.
words=(river engineer garden machine city teacher storm library farmer window mountain child)
verbs=(watches carries builds finds follows opens remembers paints mends visits)
: > a.txt
for i in $(seq 0 59); do
  echo "The ${words[i % 12]} ${verbs[i % 10]} the ${words[(i * 7 + 3) % 12]} near the old bridge, number $i." >> a.txt
  [ $((i % 3)) -eq 2 ] && echo >> a.txt
done
: > b.jsonl
for i in $(seq 0 29); do
  echo "{\"id\": $i, \"text\": \"A ${words[i % 12]} once ${verbs[(i + 3) % 10]} a café \u00e9t\u00e9 $i times.\"}" >> b.jsonl
done
eot=0  # <|endoftext|> of the fixture

# 1. --print-ids: one line of ids per input line.
printf 'hello world\nthe river\n' | "$prep" --tokenizer "$tok" --print-ids > ids.txt
[ "$(wc -l < ids.txt)" -eq 2 ] || fail "--print-ids: expected 2 lines"
grep -qE '^[0-9]+( [0-9]+)*$' ids.txt || fail "--print-ids: not space-separated ids"

# 2. One document per line, no validation split: the .bin is exactly print-ids + eot per line.
"$prep" --tokenizer "$tok" --input a.txt --text-split line --valid-fraction 0 --threads 2 \
  --output-prefix out/lines > summary.txt
grep -v '^$' a.txt | "$prep" --tokenizer "$tok" --print-ids | sed "s/\$/ $eot/" | tr ' ' '\n' > expected.txt
od -An -v -tu2 out/lines_train.bin | tr -s ' ' '\n' | sed '/^$/d' > got.txt
cmp -s expected.txt got.txt || fail "megatron .bin differs from --print-ids + eot"
[ ! -e out/lines_valid.bin ] || fail "a validation split was written with --valid-fraction 0"
grep -q "60 documents (train 60, valid 0)" summary.txt || fail "summary: $(cat summary.txt)"
grep -q "out/lines_train.idx" summary.txt || fail "summary does not list the .idx"
# The .idx header: version 1, dtype 8 (uint16), 60 sequences, 61 document indices.
[ "$(head -c 9 out/lines_train.idx | od -An -c | tr -d ' ')" = 'MMIDIDX\0\0' ] || fail "idx magic"
[ "$(od -An -j17 -N1 -tu1 out/lines_train.idx | tr -d ' ')" = 8 ] || fail "idx dtype"
[ "$(od -An -j18 -N8 -tu8 out/lines_train.idx | tr -d ' ')" = 60 ] || fail "idx sequence count"
[ "$(od -An -j26 -N8 -tu8 out/lines_train.idx | tr -d ' ')" = 61 ] || fail "idx document count"

#    CRLF line ends are newlines too.
sed 's/$/\r/' a.txt > crlf.txt
"$prep" --tokenizer "$tok" --input crlf.txt --text-split line --valid-fraction 0 --output-prefix out/crlf > /dev/null
cmp -s out/lines_train.bin out/crlf_train.bin || fail "CRLF lines encode differently"

# 3. The same as an llm.c shard: header {20240520, 1, count}, then the same tokens.
"$prep" --tokenizer "$tok" --input a.txt --text-split line --valid-fraction 0 --format llmc \
  --output-prefix out/llmc > /dev/null
[ "$(od -An -N12 -td4 out/llmc_train.bin | tr -s ' ')" = " 20240520 1 $(wc -l < got.txt)" ] || fail "llm.c header"
od -An -v -j1024 -tu2 out/llmc_train.bin | tr -s ' ' '\n' | sed '/^$/d' | cmp -s - got.txt ||
  fail "llm.c tokens differ from the megatron ones"

# 4. JSONL + paragraphs with a split: exact valid count; seeded (same seed = same files,
#    1 thread or 2); documents in input order.
for t in 1 2; do
  "$prep" --tokenizer "$tok" --input a.txt b.jsonl --text-split blank-line --valid-docs 5 \
    --threads $t --output-prefix "out/split$t" > "split$t.txt"
done
grep -q "50 documents (train 45, valid 5)" split1.txt || fail "split: $(cat split1.txt)"
for f in train.bin train.idx valid.bin valid.idx; do
  cmp -s "out/split1_$f" "out/split2_$f" || fail "$f differs between 1 and 2 threads"
done
"$prep" --tokenizer "$tok" --input a.txt b.jsonl --text-split blank-line --valid-docs 5 \
  --seed 7 --output-prefix out/seed7 > /dev/null
cmp -s out/split1_valid.bin out/seed7_valid.bin && fail "another seed chose the same validation documents"
[ $(($(stat -c %s out/split1_train.bin) + $(stat -c %s out/split1_valid.bin))) -eq \
  $(($(stat -c %s out/seed7_train.bin) + $(stat -c %s out/seed7_valid.bin))) ] || fail "the split lost tokens"

# 5. Bad input. A JSONL line that is not JSON (line 4) and one without the field (line 7):
#    stop names file:line and leaves no output; skip counts them.
cp b.jsonl bad.jsonl
sed -i '4s/.*/{"text": "unterminated/; 7s/.*/{"body": "no text field"}/' bad.jsonl
rc=0
"$prep" --tokenizer "$tok" --input a.txt bad.jsonl --output-prefix out/bad 2> err.txt > /dev/null || rc=$?
[ "$rc" -eq 1 ] || fail "bad JSONL: exit status $rc, expected 1"
grep -q "bad.jsonl:4: not a JSON line" err.txt || fail "stop error: $(cat err.txt)"
ls out/bad_* > /dev/null 2>&1 && fail "a stopped run left files: $(ls out/bad_*)"
"$prep" --tokenizer "$tok" --input a.txt bad.jsonl --output-prefix out/bad --on-bad-input skip \
  > skip.txt 2> skip_err.txt || fail "skip mode failed: $(cat skip_err.txt)"
grep -q "skipped 2 bad inputs" skip.txt || fail "skip summary: $(cat skip.txt)"
grep -q "bad.jsonl:7: no \"text\" field" skip_err.txt || fail "skip warning: $(cat skip_err.txt)"
grep -q "29 documents (train" skip.txt || fail "skip counts: $(cat skip.txt)"
#    Invalid UTF-8 on line 3 of a text file; a missing input.
printf 'good line\nanother\nbad \xff byte\n' > utf.txt
rc=0
"$prep" --tokenizer "$tok" --input utf.txt --output-prefix out/utf 2> err.txt > /dev/null || rc=$?
[ "$rc" -eq 1 ] || fail "invalid UTF-8: exit status $rc"
grep -q "utf.txt:3: invalid UTF-8 (byte 0xFF at column 5)" err.txt || fail "utf-8 error: $(cat err.txt)"
rc=0
"$prep" --tokenizer "$tok" --input a.txt missing.txt --output-prefix out/missing 2> err.txt > /dev/null || rc=$?
[ "$rc" -eq 1 ] && grep -q "missing.txt: no such file" err.txt || fail "missing input: $(cat err.txt)"
rc=0
"$prep" --tokenizer "$tok" --input a.txt --output-prefix out/x --format nope 2> err.txt || rc=$?
[ "$rc" -eq 2 ] || fail "a bad --format: exit status $rc, expected 2"

# 5b. Option ranges: --threads is bounded (100000 used to abort in thread creation).
for t in 100000 0 -3; do
  rc=0
  "$prep" --tokenizer "$tok" --input a.txt --output-prefix out/threads --threads=$t 2> err.txt > /dev/null || rc=$?
  [ "$rc" -eq 2 ] && grep -q -- "--threads $t: must be in \[1, 1024\]" err.txt || fail "--threads $t: rc $rc, $(cat err.txt)"
done
"$prep" --help | grep -q "encoding threads, 1 to 1024" || fail "--help does not give the --threads range"
for bad in "--threads=two|--threads two: expected an integer" "--seed=-1|--seed -1: expected an integer" \
           "--valid-fraction=1|--valid-fraction 1: must be in [0, 1)"; do
  rc=0
  "$prep" --tokenizer "$tok" --input a.txt --output-prefix out/x "${bad%%|*}" 2> err.txt > /dev/null || rc=$?
  [ "$rc" -eq 2 ] && grep -qF -- "${bad#*|}" err.txt || fail "${bad%%|*}: rc $rc, $(cat err.txt)"
done
rc=0
"$prep" --tokenizer "$tok" --input a.txt --output-prefix out/x --valid-docs=-1 2> err.txt > /dev/null || rc=$?
[ "$rc" -eq 2 ] && grep -q -- "--valid-docs -1: must be >= 0" err.txt || fail "--valid-docs -1: rc $rc, $(cat err.txt)"

# 5c. An input that is also an output (the same file, through a symlink or a hard link)
#     is refused before anything is written, and left as it was.
cp a.txt out/clash_train.bin
ln -sf clash_train.bin out/clash_link.txt
ln -f out/clash_train.bin hard.txt
for input in out/clash_train.bin out/clash_link.txt hard.txt; do
  rc=0
  "$prep" --tokenizer "$tok" --input "$input" --format llmc --output-prefix out/clash 2> err.txt > /dev/null || rc=$?
  [ "$rc" -eq 2 ] && grep -q "input $input is also the output file out/clash_train.bin" err.txt ||
    fail "input = output via $input: rc $rc, $(cat err.txt)"
  cmp -s a.txt out/clash_train.bin || fail "the input $input was overwritten"
done

# 5d. SIGTERM while writing: the .tmp files are removed and the exit status is 128 + 15.
{ yes "The river watches the garden near the old bridge, number 12, and the farmer mends a window." || true; } |
  head -c 40000000 > big.txt
"$prep" --tokenizer "$tok" --input big.txt --text-split line --valid-fraction 0 --threads 2 \
  --output-prefix out/sig > /dev/null 2> sig_err.txt &
pid=$!
for _ in $(seq 1 400); do
  [ -e out/sig_train.bin.tmp ] && break
  sleep 0.05
done
[ -e out/sig_train.bin.tmp ] || fail "ps_prep wrote no .tmp file to interrupt: $(cat sig_err.txt)"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 143 ] || fail "SIGTERM: exit status $rc, expected 143: $(cat sig_err.txt)"
grep -q "stopped by signal 15" sig_err.txt || fail "SIGTERM message: $(cat sig_err.txt)"
ls out/sig_* > /dev/null 2>&1 && fail "SIGTERM left files: $(ls out/sig_*)"

# 5e. A write that fails midway (a file-size limit, as a disk that fills: the validation
#     split, here the larger, cannot be written) leaves the dataset already at the prefix
#     whole: no new train files beside old valid ones. A later run without a validation
#     split removes the old one (it belongs to another corpus).
args=(--tokenizer "$tok" --input a.txt b.jsonl --text-split blank-line --valid-fraction 0.9 --seed 3)
"$prep" "${args[@]}" --output-prefix out/keep > /dev/null
"$prep" "${args[@]}" --seed 4 --output-prefix out/probe > /dev/null
cp out/keep_train.bin keep_train.before
cmp -s out/keep_train.bin out/probe_train.bin && fail "seeds 3 and 4 chose the same training documents"
sizes="train $(stat -c %s out/probe_train.bin) B, valid $(stat -c %s out/probe_valid.bin) B"
limit=$(( ($(stat -c %s out/probe_train.bin) + $(stat -c %s out/probe_valid.bin)) / 2 / 1024 ))  # KiB (bash's unit)
rc=0
(ulimit -f "$limit"; trap '' XFSZ; exec "$prep" "${args[@]}" --seed 4 --output-prefix out/keep) > /dev/null 2> err.txt || rc=$?
[ "$rc" -ne 0 ] || fail "the write past a file-size limit of $limit KiB succeeded ($sizes)"
cmp -s keep_train.before out/keep_train.bin || fail "a failed run replaced the train split: $(cat err.txt)"
ls out/keep_*.tmp > /dev/null 2>&1 && fail "a failed run left: $(ls out/keep_*.tmp)"
"$prep" --tokenizer "$tok" --input a.txt --valid-fraction 0 --output-prefix out/keep > /dev/null
[ ! -e out/keep_valid.bin ] && [ ! -e out/keep_valid.idx ] || fail "the old validation split was left beside new data"

# 6. ps_train reads the megatron output (prefix for train, the .idx path for valid).
vocab=$(sed -n 's/.*vocab \([0-9]*\).*/\1/p' summary.txt)
[ -n "$vocab" ] || fail "the summary does not give the vocabulary size"
cat > run.yaml <<YAML
model: {n_layer: 2, n_head: 2, n_embd: 32, n_positions: 32, vocab_size: $vocab}
data: {format: megatron, train_path: out/split1_train, valid_path: out/split1_valid.idx, seq_len: 16}
train: {micro_batch_size: 2, global_batch_size: 2, max_steps: 3, eval_steps: 1}
run: {threads: 1, output_dir: run}
checkpoint: {at_end: false}
logging: {level: warn}
YAML
"$train" --config run.yaml > train.log 2>&1 || fail "ps_train on megatron data: $(tail -5 train.log)"
grep -q '"step": 3,' run/metrics.jsonl || fail "ps_train did not reach step 3"
grep -q '"eval_loss"' run/metrics.jsonl || fail "ps_train did not evaluate on the valid split"
#    A vocabulary smaller than the ids: a data error naming the file, exit 2.
rc=0
"$train" --config run.yaml --set model.vocab_size=10 --set run.output_dir=run2 > train2.log 2>&1 || rc=$?
[ "$rc" -eq 2 ] && grep -q "out/split1_train.bin: token" train2.log || fail "vocab check: rc $rc, $(tail -3 train2.log)"
echo "ps_prep test passed"
