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

# Sends signal $1 (number $2) to a run in $3 after its first step; checks exit 42, the
# stopped_by_signal line, and a complete checkpoint named by latest; prints its step.
stop_with() {
  local sig=$1 num=$2 out=$3 pid rc step
  "$bin" --config "$work/run.yaml" --set run.output_dir="$out" &
  pid=$!
  wait_for_step "$out"
  kill "-$sig" "$pid"
  rc=0
  wait "$pid" || rc=$?
  [ "$rc" -eq 42 ] || { echo "SIG$sig: exit status $rc, expected 42" >&2; exit 1; }
  step=$(sed -n "s/.*\"stopped_by_signal\": $num, \"step\": \([0-9]*\).*/\1/p" "$out/metrics.jsonl")
  [ -n "$step" ] || { echo "SIG$sig: no stopped_by_signal line" >&2; exit 1; }
  [ -f "$out/checkpoints/step_$step/state.json" ] || { echo "SIG$sig: no checkpoint at step $step" >&2; exit 1; }
  [ "$(cat "$out/checkpoints/latest")" = "step_$step" ] || { echo "latest does not name step_$step" >&2; exit 1; }
  echo "$step"
}

stop_with TERM 15 "$work/term" > /dev/null  # Slurm's time limit, `kill`
out="$work/usr1"
step=$(stop_with USR1 10 "$out")           # Slurm's --signal=USR1@90
# The requeued job: the same command resumes there (and here finishes two steps later).
"$bin" --config "$work/run.yaml" --set run.output_dir="$out" --set train.max_steps=$((step + 2))
grep -q "\"resumed_from_step\": $step" "$out/metrics.jsonl" || { echo "the rerun did not resume from $step" >&2; exit 1; }
grep -q "\"step\": $((step + 2))," "$out/metrics.jsonl" || { echo "the resumed run did not train on" >&2; exit 1; }

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
