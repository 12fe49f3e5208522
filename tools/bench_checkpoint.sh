#!/usr/bin/env bash
# Checkpoint save cost against the disk: trains one step of a preset (synthetic data,
# tiny batch) with a checkpoint at the end, written in the background (checkpoint.async)
# and in place, and writes the same number of bytes with dd (fsync) as the disk's own
# time for them. Prints size, times and the ratio save / disk.
#   tools/bench_checkpoint.sh [preset] [binary]       # default gpt2-124m, bazel-bin/trainer/ps_train
# On a GPU machine: tools/gpu_run.sh-style LD_LIBRARY_PATH, and --set run.device=cuda via EXTRA.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-gpt2-124m}
bin=${2:-bazel-bin/trainer/ps_train}
out=${OUT_DIR:-runs/bench_checkpoint}
rm -rf "$out"; mkdir -p "$out"
cat > "$out/base.yaml" <<YAML
model: {preset: $preset}
data: {format: synthetic, seq_len: 64}
train: {micro_batch_size: 1, global_batch_size: 1, max_steps: 1}
logging: {level: warn}
YAML
for mode in async sync; do
  async=$([ $mode = async ] && echo true || echo false)
  "$bin" --config "$out/base.yaml" --set run.output_dir="$out/$mode" --set checkpoint.async=$async ${EXTRA:-}
  line=$(grep checkpoint_step "$out/$mode/metrics.jsonl")
  python3 - "$mode" "$line" <<'PY'
import json, sys
r = json.loads(sys.argv[2])
print(f"{sys.argv[1]:5s}: {r['checkpoint_bytes']/1e6:.1f} MB, training thread {r['save_snapshot_s'] if r['save_background'] else r['save_write_s']:.2f} s, "
      f"writing {r['save_write_s']:.2f} s ({r['checkpoint_bytes']/1e6/r['save_write_s']:.0f} MB/s)")
PY
done
bytes=$(python3 -c "import json;print([json.loads(l) for l in open('$out/sync/metrics.jsonl') if 'checkpoint_step' in l][0]['checkpoint_bytes'])")
start=$(date +%s.%N)
dd if=/dev/zero of="$out/dd.bin" bs=1M count=$((bytes / 1048576 + 1)) conv=fsync status=none
end=$(date +%s.%N)
python3 -c "b=$bytes; t=$end-$start; print(f'disk : {b/1e6:.1f} MB with dd conv=fsync in {t:.2f} s ({b/1e6/t:.0f} MB/s)')"
rm -f "$out/dd.bin"
