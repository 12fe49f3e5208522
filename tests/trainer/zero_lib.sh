# Shared by the ZeRO tests (zero_test.sh, zero_lora_test.sh): the tiny model's config in
# $tmp/tiny.yaml (6 steps, chunks, synthetic data, the CPU), and
#   run NAME ARGS...       ps_train into $tmp/NAME (its log $tmp/NAME.log, printed on failure)
#   compare A B TOL [FIRST] per-step losses of runs A and B agree to TOL relative (from step FIRST)
#   summary NAME KEY       the summary line's KEY
#   metric NAME KEY        KEY of the last step line that has it
# Sourced under `set -euo pipefail`.
bin="$TEST_SRCDIR/ps_train/trainer/ps_train"
tmp="$TEST_TMPDIR"
cat > "$tmp/tiny.yaml" <<'YAML'
model: {n_layer: 2, n_head: 2, n_embd: 64, n_positions: 64, vocab_size: 256, dropout: 0.0}
data: {format: synthetic, seq_len: 64}
train: {micro_batch_size: 2, global_batch_size: 8, max_steps: 6, eval_steps: 1}
run: {threads: 1, device: cpu}
checkpoint: {at_end: false}
chunk: {enabled: true, size_elements: 20000}
distributed: {init_timeout_s: 60, timeout_s: 60}
YAML
run() {  # run NAME ARGS...: ps_train into $tmp/NAME; prints its log on failure
  local name=$1
  shift
  "$bin" -c "$tmp/tiny.yaml" --set run.output_dir="$tmp/$name" "$@" > "$tmp/$name.log" 2>&1 ||
    { cat "$tmp/$name.log"; echo "FAILED: $name"; exit 1; }
}
# compare A B TOL [FIRST]: per-step losses of runs A and B agree to TOL relative (from step FIRST).
compare() {
  python3 - "$tmp/$1/metrics.jsonl" "$tmp/$2/metrics.jsonl" "$3" "${4:-1}" <<'PY'
import json, sys
def losses(p):
    return {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(p) if '"loss"' in l and '"step"' in l}
a, b, tol, first = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
steps = [s for s in range(first, 7)]
assert all(s in a and s in b for s in steps), (sys.argv, a, b)
for s in steps:
    assert abs(a[s] - b[s]) <= tol * abs(b[s]), f"step {s}: {a[s]} vs {b[s]} ({sys.argv[1]} vs {sys.argv[2]})"
print("losses agree:", sys.argv[1], [a[s] for s in steps])
PY
}
summary() {  # summary NAME KEY: the summary line's KEY
  python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "\"summary\"" in l][0][sys.argv[2]])' \
    "$tmp/$1/metrics.jsonl" "$2"
}
metric() {  # metric NAME KEY: KEY of the last step line that has it
  python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "\""+sys.argv[2]+"\"" in l][-1][sys.argv[2]])' \
    "$tmp/$1/metrics.jsonl" "$2"
}

