#!/usr/bin/env bash
# Ranks that disagree, and a rendezvous that never answers, through the real binary on
# Gloo (issue #26 §1):
# - ranks started with another learning rate, or another model shape, both stop with
#   exit 2 before training, naming the key, its values and the ranks (a shape mismatch
#   once aborted rank 0 inside Gloo; an lr mismatch trained to the end with exit 0);
# - a rank whose rendezvous port is held by a program that accepts but never answers
#   stops near distributed.init_timeout_s, and a SIGTERM ends that wait at once;
# - one version: what --version prints is what a checkpoint records;
# - ranks that find different checkpoints to resume (a node's own checkpoint.dir) stop
#   with exit 2 before training, naming each rank's step, before rank 0 sets aside a
#   corrupt newer checkpoint;
# - when rank 0 of --nproc 2 is killed, the launcher names it and the group stops at once.
set -euo pipefail
bin="$TEST_SRCDIR/ps_train/trainer/ps_train"
tmp="$TEST_TMPDIR"
cat > "$tmp/tiny.yaml" <<'YAML'
model: {n_layer: 1, n_head: 2, n_embd: 32, n_positions: 32, vocab_size: 256}
data: {format: synthetic, seq_len: 32}
train: {micro_batch_size: 2, global_batch_size: 4, max_steps: 3}
run: {threads: 1, device: cpu}
checkpoint: {at_end: false}
distributed: {init_timeout_s: 30, timeout_s: 30}
YAML
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
fail() { echo "FAIL: $*"; for f in "$tmp"/*.log; do echo "== $f"; cat "$f"; done; exit 1; }

# two_ranks NAME SET0 SET1: ranks 0 and 1 with their own --set; fills rc0, rc1.
two_ranks() {
  local name=$1 port
  port=$(free_port)
  RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$bin" -c "$tmp/tiny.yaml" --set run.output_dir="$tmp/$name" --set "$2" > "$tmp/$name.0.log" 2>&1 &
  local p0=$!
  RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$bin" -c "$tmp/tiny.yaml" --set run.output_dir="$tmp/$name" --set "$3" > "$tmp/$name.1.log" 2>&1 &
  local p1=$!
  rc0=0; wait $p0 || rc0=$?
  rc1=0; wait $p1 || rc1=$?
}

echo "== another learning rate on rank 1"
two_ranks lr optimizer.lr=0.001 optimizer.lr=0.01
[ "$rc0" = 2 ] && [ "$rc1" = 2 ] || fail "lr: exit $rc0 / $rc1, expected 2 / 2"
grep -q "optimizer.lr: 0.001 on rank 0; 0.01 on rank 1" "$tmp/lr.0.log" || fail "lr: rank 0 does not name the key"
grep -q "optimizer.lr: 0.001 on rank 0; 0.01 on rank 1" "$tmp/lr.1.log" || fail "lr: rank 1 does not name the key"
[ ! -s "$tmp/lr/metrics.jsonl" ] || fail "lr: a step was trained"

echo "== another model shape on rank 1"
two_ranks shape model.n_embd=32 model.n_embd=64
[ "$rc0" = 2 ] && [ "$rc1" = 2 ] || fail "shape: exit $rc0 / $rc1, expected 2 / 2 (134 = abort)"
grep -q "model.n_embd: 32 on rank 0; 64 on rank 1" "$tmp/shape.0.log" || fail "shape: rank 0 does not name the key"

echo "== the same config: trains; its checkpoint records the version --version prints"
two_ranks same checkpoint.at_end=true checkpoint.at_end=true
[ "$rc0" = 0 ] && [ "$rc1" = 0 ] || fail "same: exit $rc0 / $rc1"
version=$("$bin" --version | cut -d' ' -f1,2)
recorded=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$tmp/same/checkpoints/step_3/state.json")
[ "$version" = "$recorded" ] || fail "--version says '$version', the checkpoint '$recorded'"

echo "== rank 1 sees no checkpoint where rank 0 resumes step 3 (a node's own checkpoint.dir)"
# A corrupt newer checkpoint, which rank 0 alone would set aside (step_4.unusable): the
# ranks compare steps before rank 0 moves anything.
cp -r "$tmp/same/checkpoints/step_3" "$tmp/same/checkpoints/step_4"
sed -i 's/"step": 3/"step": 4/' "$tmp/same/checkpoints/step_4/state.json"
printf 'x' >> "$tmp/same/checkpoints/step_4/model.safetensors"
two_ranks same "checkpoint.dir=$tmp/same/checkpoints" "checkpoint.dir=$tmp/empty_ckpt"
[ "$rc0" = 2 ] && [ "$rc1" = 2 ] || fail "resume: exit $rc0 / $rc1, expected 2 / 2"
for r in 0 1; do
  grep -q "resumed checkpoint: none on rank 1; step 3 on rank 0" "$tmp/same.$r.log" ||
    fail "resume: rank $r does not name the steps"
done
saved=$(ls "$tmp/same/checkpoints" | grep -v '^step_[34]$' | grep -v '^latest$' || true)
[ -z "$saved" ] || fail "resume: a checkpoint was saved or moved ($saved)"
[ -f "$tmp/same/checkpoints/step_4/state.json" ] || fail "resume: the newer checkpoint step_4 was removed"

echo "== a rank variable that is not a number is a user error (exit 2), naming it"
rc=0
RANK=x WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 "$bin" -c "$tmp/tiny.yaml" > "$tmp/bad_rank.log" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q "RANK='x' is not an integer" "$tmp/bad_rank.log" || fail "RANK=x: exit $rc"

echo "== rank 0 alone refused (its folder held by another process): it exits at once"
# (Before, its communicator waited 10 s for every rank to leave, while rank 1 waited in
# a collective rank 0 never joined.)
mkdir -p "$tmp/held"
flock "$tmp/held/.ps_train.lock" sleep 120 &
holder=$!
sleep 0.5
port=$(free_port)
t0=$(date +%s%N)
{ rc=0
  RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$bin" -c "$tmp/tiny.yaml" --set run.output_dir="$tmp/held" > "$tmp/held.0.log" 2>&1 || rc=$?
  echo "$rc" > "$tmp/held.rc0"
  echo $(( ($(date +%s%N) - t0) / 1000000 )) > "$tmp/held.ms0"; } &
p0=$!
RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
  "$bin" -c "$tmp/tiny.yaml" --set run.output_dir="$tmp/held" > "$tmp/held.1.log" 2>&1 || true
wait $p0 || true
kill "$holder" 2> /dev/null || true
[ "$(cat "$tmp/held.rc0")" = 2 ] && grep -q "ps_train" "$tmp/held.0.log" ||
  fail "held folder: rank 0 exit $(cat "$tmp/held.rc0")"
[ "$(cat "$tmp/held.ms0")" -lt 8000 ] || fail "held folder: rank 0 took $(cat "$tmp/held.ms0") ms to stop"

echo "== a rendezvous port held by a program that never answers"
silent_port_file="$tmp/silent.port"
python3 - "$silent_port_file" <<'PY' &
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
held = []
while True:
    c, _ = s.accept(); held.append(c)  # accepted, never answered
PY
silent=$!
trap 'kill $silent 2>/dev/null || true' EXIT
for _ in $(seq 50); do [ -s "$silent_port_file" ] && break; sleep 0.1; done
port=$(cat "$silent_port_file")
start=$(date +%s)
rc=0
RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
  "$bin" -c "$tmp/tiny.yaml" --set run.output_dir="$tmp/silent" --set distributed.init_timeout_s=3 \
  > "$tmp/silent.log" 2>&1 || rc=$?
took=$(( $(date +%s) - start ))
[ "$rc" != 0 ] || fail "silent: exit 0"
[ "$took" -le 20 ] || fail "silent: took $took s with init_timeout_s 3"
grep -q "rendezvous\|rendezvous store" "$tmp/silent.log" || fail "silent: the error does not name the rendezvous"

echo "== SIGTERM during that wait"
RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
  "$bin" -c "$tmp/tiny.yaml" --set run.output_dir="$tmp/silent_term" --set distributed.init_timeout_s=120 \
  > "$tmp/silent_term.log" 2>&1 &
waiter=$!
sleep 2
start=$(date +%s)
kill -TERM $waiter
rc=0; wait $waiter || rc=$?
took=$(( $(date +%s) - start ))
[ "$rc" = 143 ] || fail "SIGTERM: exit $rc, expected 143"
[ "$took" -le 5 ] || fail "SIGTERM: took $took s to stop"
grep -q "stopped by signal 15" "$tmp/silent_term.log" || fail "SIGTERM: no message"
echo "== --nproc 2, rank 0 killed: the survivor names it and the group stops at once, without c10d's log noise"
"$bin" -c "$tmp/tiny.yaml" --set run.output_dir="$tmp/killed" --set train.max_steps=1000000 --nproc 2 \
  > "$tmp/killed.log" 2>&1 &
launcher=$!
for _ in $(seq 100); do grep -q "rank 0\] step 1/" "$tmp/killed.log" 2>/dev/null && break; sleep 0.1; done
rank0=$(for st in /proc/[0-9]*/stat; do read -r pid _ _ ppid _ < "$st" 2>/dev/null || continue
         if [ "$ppid" = "$launcher" ]; then echo "$pid"; fi; done | sort -n | head -1)  # the first rank forked
[ -n "$rank0" ] || fail "killed: no rank process"
start=$(date +%s)
kill -KILL "$rank0"
rc=0; wait $launcher || rc=$?
took=$(( $(date +%s) - start ))
[ "$rc" != 0 ] || fail "killed: exit 0"
[ "$took" -le 20 ] || fail "killed: took $took s"
grep -q "rank 0 was killed by signal 9; stopping the other ranks" "$tmp/killed.log" || fail "killed: rank 0 not named"
if grep -q "TCPStore.cpp\|frame #" "$tmp/killed.log"; then fail "killed: c10d's warnings reached the log"; fi
echo "PASS"
