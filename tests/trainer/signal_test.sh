#!/usr/bin/env bash
# Stop signals through the real binary (trainer/stop_signals.h): SIGUSR1 (Slurm's
# --signal=USR1@90) or SIGTERM during a run finishes the step, writes a checkpoint and exits 42;
# the requeued command resumes from that step. A second signal exits at once (128 + 15).
set -euo pipefail
bin="$TEST_SRCDIR/ps_train/trainer/ps_train"
work="$TEST_TMPDIR/signal"
mkdir -p "$work"
cat > "$work/run.yaml" <<'YAML'
model: {n_layer: 4, n_head: 4, n_embd: 128, n_positions: 128, vocab_size: 256}
data: {format: synthetic, seq_len: 128}
train: {micro_batch_size: 8, global_batch_size: 8, max_steps: 100000}
run: {threads: 1}
logging: {level: warn}
YAML

wait_for_step() {  # until metrics.jsonl has a step line
  for _ in $(seq 600); do
    grep -q '"loss"' "$1/metrics.jsonl" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "no step within 60 s" >&2
  exit 1
}

out="$work/usr1"
"$bin" --config "$work/run.yaml" --set run.output_dir="$out" &
pid=$!
wait_for_step "$out"
kill -USR1 "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 42 ] || { echo "SIGUSR1: exit status $rc, expected 42" >&2; exit 1; }
grep -q '"stopped_by_signal": 10' "$out/metrics.jsonl" || { echo "no stopped_by_signal line" >&2; exit 1; }
step=$(sed -n 's/.*"stopped_by_signal": 10, "step": \([0-9]*\).*/\1/p' "$out/metrics.jsonl")
[ -f "$out/checkpoints/step_$step/state.json" ] || { echo "no checkpoint at step $step" >&2; exit 1; }
[ "$(cat "$out/checkpoints/latest")" = "step_$step" ] || { echo "latest does not name step_$step" >&2; exit 1; }
# The requeued job: the same command resumes there (and here finishes two steps later).
"$bin" --config "$work/run.yaml" --set run.output_dir="$out" --set train.max_steps=$((step + 2))
grep -q "\"resumed_from_step\": $step" "$out/metrics.jsonl" || { echo "the rerun did not resume from $step" >&2; exit 1; }
grep -q "\"step\": $((step + 2))," "$out/metrics.jsonl" || { echo "the resumed run did not train on" >&2; exit 1; }

# SIGTERM (Slurm's time limit, `kill`): the same.
out="$work/term"
"$bin" --config "$work/run.yaml" --set run.output_dir="$out" &
pid=$!
wait_for_step "$out"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 42 ] || { echo "SIGTERM: exit status $rc, expected 42" >&2; exit 1; }
grep -q '"stopped_by_signal": 15' "$out/metrics.jsonl" || { echo "no stopped_by_signal 15 line" >&2; exit 1; }
ls "$out"/checkpoints/step_*/state.json > /dev/null || { echo "SIGTERM: no checkpoint" >&2; exit 1; }

# Two SIGTERMs: the second one ends the process at once, without waiting for the step
# (steps of ~1 s here; the signals are 0.2 s apart so they are not merged).
out="$work/twice"
"$bin" --config "$work/run.yaml" --set run.output_dir="$out" --set train.micro_batch_size=64 \
  --set train.global_batch_size=64 &
pid=$!
wait_for_step "$out"
kill -TERM "$pid"; sleep 0.2; kill -TERM "$pid" || true
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 143 ] || { echo "two SIGTERMs: exit status $rc, expected 143" >&2; exit 1; }
echo "signal test passed"
