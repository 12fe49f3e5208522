#!/usr/bin/env bash
# SIGKILL at random moments through the real binary, resumed each time: the losses
# match an uninterrupted run bitwise (tools/kill_resume_check.py, here at a small scale:
# a tiny model on synthetic tokens, 40 steps, 4 kills; the full check is 200 quick-start
# steps and 20 kills, README "Checkpoints and resuming").
set -euo pipefail
root="$TEST_SRCDIR/ps_train"
cat > "$TEST_TMPDIR/tiny.yaml" <<'YAML'
model: {n_layer: 2, n_head: 2, n_embd: 64, n_positions: 64, vocab_size: 256, dropout: 0.1}
data: {format: synthetic, seq_len: 64}
train: {micro_batch_size: 4, global_batch_size: 8, max_steps: 40}
run: {threads: 1}
YAML
python3 "$root/tools/kill_resume_check.py" --binary "$root/trainer/ps_train" --config "$TEST_TMPDIR/tiny.yaml" \
  --steps 40 --kills 4 --every 5 --out "$TEST_TMPDIR/kill_resume"
