#!/usr/bin/env bash
# ps_prep --format sft through the real program: the summary (template, trained tokens,
# truncated/dropped counts), one BOS per example (the template writes it; none added
# again), and bad input: a line that is not JSON, lacks the fields, has a role the
# template refuses (raise_exception), roles out of order, an empty assistant turn or none
# (exit 1 naming file:line, nothing written; --on-bad-input skip counts them); a folder
# without a chat template, a template that does not parse or uses an unsupported
# construct, bad sft options (exit 2, naming the file, line or option).
set -euo pipefail
prep="$TEST_SRCDIR/ps_train/tools/ps_prep"
data="$TEST_SRCDIR/ps_train/tests/tools/testdata"
cd "$TEST_TMPDIR"
fail() { echo "FAIL: $*" >&2; exit 1; }

# run STATUS NAME ARGS...: ps_prep --format sft exits STATUS; its output in NAME.log.
run() {
  local want=$1 name=$2 status=0
  shift 2
  "$prep" --format sft --valid-fraction 0 --threads 2 --output-prefix "out/$name" "$@" > "$name.log" 2>&1 || status=$?
  [ "$status" -eq "$want" ] || { cat "$name.log"; fail "$name: exit status $status, expected $want"; }
}
# says NAME NEEDLE...: NAME.log holds each NEEDLE.
says() {
  local name=$1
  shift
  for needle in "$@"; do grep -qF -- "$needle" "$name.log" || { cat "$name.log"; fail "$name: no '$needle'"; }; done
  echo "ok: $name: $(grep -m1 'ps_prep' "$name.log")"
}
nothing_written() { ! ls out/"$1"_* > /dev/null 2>&1 || fail "$1: output files left behind: $(ls out/"$1"_*)"; }

mistral="$data/sft/mistral"
llama="$data/sft/llama3"

# 1. A good run: the summary, one BOS per example, a mask byte per token.
run 0 good --tokenizer "$llama" --input "$data/sft/messages.jsonl" --max-tokens 120 --overlong drop
says good "chat template $llama/tokenizer_config.json (chat_template)" "tokens trained on (--train-on assistant)" \
  "over --max-tokens 120: 0 truncated, 5 dropped"
[ "$(stat -c %s out/good_train.mask)" -eq $(( $(stat -c %s out/good_train.bin) / 2 )) ] || fail "mask size != tokens"
bos=$(od -An -v -tu2 -N2 out/good_train.bin | tr -d ' ')
second=$(od -An -v -tu2 -j2 -N2 out/good_train.bin | tr -d ' ')
[ "$bos" -eq 0 ] && [ "$second" -ne 0 ] || fail "expected one <|begin_of_text|> (0) first, got $bos $second"

# 2. Bad lines: exit 1 naming file:line, nothing written.
printf '%s\n' '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}' '{"messages": [' > bad_json.jsonl
run 1 bad_json --tokenizer "$mistral" --input bad_json.jsonl
says bad_json "bad_json.jsonl:2: not a JSON line" "(--on-bad-input skip skips it)"
nothing_written bad_json

echo '{"text": "no chat here"}' > no_field.jsonl
run 1 no_field --tokenizer "$mistral" --input no_field.jsonl
says no_field 'no_field.jsonl:1: no "messages", "conversations", "instruction" or "prompt" field'

echo '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant"}]}' > no_content.jsonl
run 1 no_content --tokenizer "$mistral" --input no_content.jsonl
says no_content 'no_content.jsonl:1: no "content" field in message 2 (--sft-field content=NAME names it)'

echo '{"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "42"}]}' > bad_role.jsonl
run 1 bad_role --tokenizer "$mistral" --input bad_role.jsonl
says bad_role "bad_role.jsonl:1: $mistral/tokenizer_config.json (chat_template): chat template line 49:" \
  "raise_exception: Only user and assistant roles are supported"

echo '{"messages": [{"role": "assistant", "content": "first"}, {"role": "user", "content": "hi"}]}' > order.jsonl
run 1 order --tokenizer "$mistral" --input order.jsonl
says order "order.jsonl:1:" "raise_exception: After the optional system message, conversation roles must alternate"

echo '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "  "}]}' > empty.jsonl
run 1 empty --tokenizer "$llama" --input empty.jsonl
says empty "empty.jsonl:1: message 2: empty assistant turn"

echo '{"messages": [{"role": "user", "content": "hi"}]}' > no_assistant.jsonl
run 1 no_assistant --tokenizer "$llama" --input no_assistant.jsonl
says no_assistant "no_assistant.jsonl:1: no assistant message to train on"
run 0 all_tokens --tokenizer "$llama" --input no_assistant.jsonl --train-on all
says all_tokens "tokens trained on (--train-on all)"

printf '{%% for m in messages %%}<{{ m.role }}>{%% if m.role != "assistant" %%}{{ m.content }}{%% endif %%}{%% endfor %%}' > ignores.jinja
run 1 ignores --tokenizer "$llama" --input "$data/sft/alpaca.jsonl" --chat-template ignores.jinja
says ignores "alpaca.jsonl:1: message 2: the chat template does not render this assistant turn's content"

echo 'plain text' > plain.txt
run 1 plain --tokenizer "$llama" --input plain.txt
says plain "plain.txt: --format sft reads JSONL (.jsonl/.ndjson), one example per line"

# 3. --on-bad-input skip: counted, the good lines written.
cat bad_json.jsonl bad_role.jsonl empty.jsonl > mixed.jsonl
run 0 mixed --tokenizer "$mistral" --input mixed.jsonl --on-bad-input skip
says mixed "skipped 3 bad inputs" "mixed.jsonl:2: not a JSON line" "mixed.jsonl:3: $mistral/tokenizer_config.json (chat_template): chat template line 49" "mixed.jsonl:4: message 2: empty assistant turn"

# 4. Templates and options: exit 2 before anything is read.
run 2 no_template --tokenizer "$data/llama_path/llama" --input empty.jsonl
says no_template "no chat template for --format sft: $data/llama_path/llama has no chat_template.jinja" "pass --chat-template FILE"
printf 'ok\n{%% if x %%}\n{{ y }\n' > syntax.jinja
run 2 syntax --tokenizer "$llama" --input empty.jsonl --chat-template syntax.jinja
says syntax "syntax.jinja (--chat-template): chat template line 3: unclosed tag (no }})"
printf '{%% macro m() %%}x{%% endmacro %%}{{ m() }}\n' > macro.jinja
run 2 macro --tokenizer "$llama" --input empty.jsonl --chat-template macro.jinja
says macro "macro.jinja (--chat-template): chat template line 1: unsupported statement '{% macro %}'"
run 2 field --tokenizer "$llama" --input empty.jsonl --sft-field turns
says field "--sft-field turns: expected NAME=VALUE"
run 2 key --tokenizer "$llama" --input empty.jsonl --sft-field turns=x
says key "--sft-field turns=x: unknown key turns"
run 2 train_on --tokenizer "$llama" --input empty.jsonl --train-on prompts
says train_on "--train-on prompts: expected assistant or all"
run 2 overlong --tokenizer "$llama" --input empty.jsonl --overlong cut
says overlong "--overlong cut: expected truncate or drop"
run 2 eot --tokenizer "$llama" --input empty.jsonl --eot-token '<|nope|>'
says eot "--eot-token <|nope|>: not a token of $llama"
run 2 input_layout --tokenizer "$llama" --input empty.jsonl --sft-input csv
says input_layout "--sft-input csv: expected auto, messages, sharegpt, alpaca or prompt-completion"
for n in no_field no_content bad_role order empty no_assistant plain no_template syntax macro; do nothing_written "$n"; done
echo "sft bad input test passed"
