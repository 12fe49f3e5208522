#!/usr/bin/env bash
# ps_sample's numeric options are range-checked before anything is loaded: each bad
# value exits 2 naming the option (--max-new-tokens -1 used to exit 0 having done nothing).
set -euo pipefail
sample="$TEST_SRCDIR/ps_train/tools/ps_sample"
cd "$TEST_TMPDIR"

fail() { echo "FAIL: $*" >&2; exit 1; }

# Each case: an option=value and the text its error must hold. --hf names a folder that
# does not exist: reaching it would be exit 1, not 2.
cases=(
  "--max-new-tokens=-1|--max-new-tokens -1: must be in [1, 1000000]"
  "--max-new-tokens=0|--max-new-tokens 0: must be in [1, 1000000]"
  "--max-new-tokens=1000001|--max-new-tokens 1000001: must be in [1, 1000000]"
  "--temperature=-0.5|--temperature -0.5: must be in [0, 100]"
  "--top-k=-2|--top-k -2: must be in [0, 100000000]"
  "--max-new-tokens=abc|--max-new-tokens abc: expected an integer"
  "--temperature=warm|--temperature warm: expected a number in [0, 100]"
  "--top-p=0|--top-p 0: must be in (0, 1]"
  "--top-p=1.5|--top-p 1.5: must be in (0, 1]"
  "--threads=-1|--threads -1: must be in [0, 1024]"
)
for c in "${cases[@]}"; do
  arg=${c%%|*}
  want=${c#*|}
  rc=0
  "$sample" --hf no_such_folder "$arg" > out.txt 2> err.txt || rc=$?
  [ "$rc" -eq 2 ] || fail "$arg: exit status $rc, expected 2: $(cat err.txt)"
  grep -qF -- "$want" err.txt || fail "$arg: message '$(cat err.txt)' lacks '$want'"
done
rc=0
"$sample" --hf no_such_folder --seed=-1 > out.txt 2> err.txt || rc=$?
[ "$rc" -eq 2 ] && grep -qF -- "--seed -1: expected an integer" err.txt || fail "--seed=-1: rc $rc, $(cat err.txt)"
# In range, the options pass and the missing folder is the error (exit 1).
rc=0
"$sample" --hf no_such_folder --max-new-tokens=5 --temperature=0 --top-k=3 --top-p=0.9 > out.txt 2> err.txt || rc=$?
[ "$rc" -eq 1 ] || fail "valid options: exit status $rc, expected 1 (missing folder): $(cat err.txt)"
# Options that do not go together: exit 2 before anything is loaded.
combos=(
  "--checkpoint x --hf y|give exactly one of --checkpoint and --hf"
  "--prompt hi|give exactly one of --checkpoint and --hf"
  "--checkpoint x --adapter y|a LoRA checkpoint's adapters are merged already"
  "--hf x --chat --dump-logits y|--chat and --dump-logits do not go together"
  "--hf x --system hello|--system, --chat-template and --template-var need --chat"
  "--hf x --template-var a=1|--system, --chat-template and --template-var need --chat"
)
for c in "${combos[@]}"; do
  read -r -a args <<< "${c%%|*}"
  want=${c#*|}
  rc=0
  "$sample" "${args[@]}" > out.txt 2> err.txt || rc=$?
  [ "$rc" -eq 2 ] || fail "${args[*]}: exit status $rc, expected 2: $(cat err.txt)"
  grep -qF -- "$want" err.txt || fail "${args[*]}: message '$(cat err.txt)' lacks '$want'"
done
# --adapter alone: its base_model_name_or_path must be a folder here (exit 1, the file named).
mkdir -p adapter
echo '{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "base_model_name_or_path": "meta-llama/Llama-3.1-8B"}' \
  > adapter/adapter_config.json
rc=0
"$sample" --adapter adapter > out.txt 2> err.txt || rc=$?
[ "$rc" -eq 1 ] && grep -qF "adapter/adapter_config.json: base_model_name_or_path 'meta-llama/Llama-3.1-8B' is not a folder here" err.txt ||
  fail "--adapter without a local base: rc $rc, $(cat err.txt)"
"$sample" --help | grep -q "1 to 1000000" || fail "--help does not give the --max-new-tokens range"
echo "ps_sample args test passed"
