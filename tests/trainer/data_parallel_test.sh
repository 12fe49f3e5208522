#!/usr/bin/env bash
# Plain data parallel through the real binary on Gloo (CPU): `--nproc 2` at micro-batch 2
# gives the per-step losses of one process at micro-batch 4 (fp32, 1e-6 relative); two
# processes started by hand with torchrun's and with Slurm's variables do too. Chunk runs
# with several ranks (ZeRO): zero_test.sh.
set -euo pipefail
bin="$TEST_SRCDIR/ps_train/trainer/ps_train"
tmp="$TEST_TMPDIR"
cat > "$tmp/tiny.yaml" <<'YAML'
model: {n_layer: 2, n_head: 2, n_embd: 64, n_positions: 64, vocab_size: 256, dropout: 0.0}
data: {format: synthetic, seq_len: 64}
train: {micro_batch_size: 2, global_batch_size: 8, max_steps: 6, eval_steps: 1}
run: {threads: 1, device: cpu}
checkpoint: {at_end: false}
distributed: {init_timeout_s: 60, timeout_s: 60}
YAML
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# compare A B: the per-step losses of two metrics.jsonl files agree to 1e-6 relative.
compare() {
  python3 - "$1" "$2" <<'PY'
import json, sys
def losses(p):
    return [json.loads(l)["loss"] for l in open(p) if '"loss"' in l and '"step"' in l]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == len(b) == 6, (sys.argv, a, b)
for i, (x, y) in enumerate(zip(a, b)):
    assert abs(x - y) <= 1e-6 * abs(y), f"step {i + 1}: {x} vs {y} ({sys.argv[1]} vs {sys.argv[2]})"
print("losses agree:", a)
PY
}

"$bin" -c "$tmp/tiny.yaml" --set run.output_dir="$tmp/one" --set train.micro_batch_size=4 > "$tmp/one.log" 2>&1

echo "== --nproc 2"
"$bin" -c "$tmp/tiny.yaml" --set run.output_dir="$tmp/nproc" --nproc 2 > "$tmp/nproc.log" 2>&1 || { cat "$tmp/nproc.log"; exit 1; }
grep -q "2 micro x 2 accumulation x 2 ranks" "$tmp/nproc.log"
compare "$tmp/nproc/metrics.jsonl" "$tmp/one/metrics.jsonl"
if grep -q "rank 1\] step" "$tmp/nproc.log"; then echo "rank 1 logged at info level"; exit 1; fi

echo "== torchrun-style environment, two processes by hand"
port=$(free_port)
pids=()
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$bin" -c "$tmp/tiny.yaml" --set run.output_dir="$tmp/torchrun" > "$tmp/torchrun.$r.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || { cat "$tmp"/torchrun.*.log; exit 1; }; done
compare "$tmp/torchrun/metrics.jsonl" "$tmp/one/metrics.jsonl"

echo "== Slurm-style environment, two processes by hand (master from the node list, port from the job id)"
job=$(python3 -c '
import socket
for job in range(4242, 20000, 97):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 15000 + job)); print(job); break
    except OSError: pass
')
pids=()
for r in 0 1; do
  env -u MASTER_ADDR -u MASTER_PORT -u RANK -u WORLD_SIZE SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r \
    SLURM_JOB_NODELIST="localhost,gpu[01-02]" SLURM_JOB_ID=$job \
    "$bin" -c "$tmp/tiny.yaml" --set run.output_dir="$tmp/slurm" > "$tmp/slurm.$r.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || { cat "$tmp"/slurm.*.log; exit 1; }; done
grep -q "launcher slurm, store localhost:$((15000 + job))" "$tmp/slurm.0.log"
compare "$tmp/slurm/metrics.jsonl" "$tmp/one/metrics.jsonl"

echo PASS
