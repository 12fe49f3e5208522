#!/usr/bin/env bash
# ps_train refuses data inputs it cannot read before it writes anything (exit 2, the key
# named): a FIFO as a data path (it used to block for good, deaf to SIGTERM), through a
# symlink too; a data.tokenizer that is missing, a plain text file, or a FIFO. And
# --plan --nproc N refuses a global batch that does not divide over N ranks.
set -euo pipefail
train="$TEST_SRCDIR/ps_train/trainer/ps_train"
tok="$TEST_SRCDIR/ps_train/tests/tools/testdata/bpe_tokenizer.json"
work="$TEST_TMPDIR/inputs"
mkdir -p "$work"
cd "$work"

fail() { echo "FAIL: $*" >&2; exit 1; }

for i in $(seq 1 200); do echo "line $i of a small corpus for the input checks"; done > corpus.txt
mkfifo train.fifo
ln -sf train.fifo fifo_link.txt
mkfifo tok.fifo
echo "just some notes, not a tokenizer" > notes.txt

# Runs ps_train on run.yaml with the given --set arguments; expects exit 2, `want` in the
# output, and no run folder. The timeout turns the old hang into a failure.
expect_error() {
  local want=$1
  shift
  rm -rf run
  local rc=0
  # -k: the old hang ignored SIGTERM too.
  timeout -k 2 10 "$train" --config run.yaml "$@" > log.txt 2>&1 || rc=$?
  [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "ps_train hung ($*)"
  [ "$rc" -eq 2 ] || fail "exit status $rc, expected 2 ($*): $(tail -3 log.txt)"
  grep -qF -- "$want" log.txt || fail "message lacks '$want' ($*): $(tail -3 log.txt)"
  [ ! -e run ] || fail "a run folder was written before the error ($*)"
}

cat > run.yaml <<YAML
model: {n_layer: 1, n_head: 2, n_embd: 32, n_positions: 32, vocab_size: 512}
data: {format: text, train_path: corpus.txt, seq_len: 16}
train: {micro_batch_size: 2, global_batch_size: 2, max_steps: 1}
run: {threads: 1, output_dir: run}
checkpoint: {at_end: false}
logging: {level: warn}
YAML

# A FIFO as train, valid (explicit format: no inference reads it), or through a symlink.
expect_error "train.fifo: is a FIFO (named pipe), not a regular file (data.train_path)" --set data.train_path=train.fifo
expect_error "train.fifo: is a FIFO (named pipe), not a regular file (data.valid_path)" --set data.valid_path=train.fifo
expect_error "fifo_link.txt: is a FIFO (named pipe), not a regular file (data.train_path)" --set data.train_path=fifo_link.txt
# The same with the format left to inference (the loader reads the file's head).
expect_error "is a FIFO (named pipe), not a regular file (data.train_path)" --set data.format=auto \
  --set data.train_path=train.fifo
expect_error "/dev/null: is a character device, not a regular file (data.train_path)" --set data.train_path=/dev/null

# data.tokenizer: missing, a plain text file, a FIFO.
expect_error "missing.json: cannot open: No such file or directory (data.tokenizer)" --set data.tokenizer=missing.json
expect_error "data.tokenizer 'notes.txt' is not a usable tokenizer" --set data.tokenizer=notes.txt
expect_error "tok.fifo: is a FIFO (named pipe), not a regular file (data.tokenizer)" --set data.tokenizer=tok.fifo

# A good tokenizer and regular files train.
rm -rf run
timeout 120 "$train" --config run.yaml --set data.tokenizer="$tok" > log.txt 2>&1 || fail "a good run failed: $(tail -5 log.txt)"
grep -q '"step": 1,' run/metrics.jsonl || fail "the good run did not reach step 1"

# --plan over 3 ranks with a global batch of 4: an error naming the three numbers.
rc=0
"$train" --config run.yaml --plan --nproc 3 --set train.global_batch_size=4 --set train.micro_batch_size=1 \
  > plan.txt 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "--plan --nproc 3: exit status $rc, expected 2: $(cat plan.txt)"
grep -qF "train.global_batch_size 4 is not divisible by train.micro_batch_size 1 x ranks 3 = 3" plan.txt ||
  fail "--plan --nproc 3 message: $(cat plan.txt)"
"$train" --config run.yaml --plan --nproc 2 --set train.global_batch_size=4 --set train.micro_batch_size=1 \
  > plan.txt 2>&1 || [ $? -eq 3 ] || fail "--plan --nproc 2 with a divisible batch: $(cat plan.txt)"
echo "ps_train inputs test passed"
