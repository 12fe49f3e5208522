#!/usr/bin/env bash
# Convergence of smaller optimizer state against fp32 moments (docs/optim.md, "Smaller
# optimizer state"): not a test, a measurement with its command.
#
#   tools/bench_state_dtype.sh [OUT_DIR] [MODE ...]    (modes: bf16 int8, the default; OUT runs/state_dtype)
#   DTYPE=bf16 tools/bench_state_dtype.sh runs/master_none int8 none-int8 none-fp32
#
# A mode is an optimizer.state_dtype, or none-<state_dtype>: that state without an fp32
# master (optimizer.master_weights none, which needs DTYPE=bf16). DTYPE (default fp32)
# is every run's precision.dtype, the fp32-moment reference's included.
#
# 1. Pre-training: the quick start (configs/quickstart.yaml, 600 steps) through the chunk
#    runtime, once per optimizer.state_dtype (fp32 first, the reference).
# 2. Fine-tuning: the fp32 run's exported model fine-tuned for 300 steps on other text
#    (this repository's README and docs, byte-level like the quick start), once per mode.
# Prints, per run, the mean training loss of the last 50 steps and the last evaluation
# loss, and each mode's relative difference from fp32 (the issue's bars: 1% for bf16, 2%
# for int8).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/state_dtype}
shift || true
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(bf16 int8)
bazel build //trainer:ps_train 2>/dev/null
bin=bazel-bin/trainer/ps_train
[ -f data_cache/quickstart/train.txt ] || python3 tools/make_corpus.py data_cache/quickstart
mkdir -p "$out/docs_text"
# The fine-tune text: our own docs, 90% to train, the rest to evaluate.
cat README.md docs/*.md > "$out/docs_text/all.txt"
python3 - "$out/docs_text" <<'EOF'
import sys
d = sys.argv[1]
text = open(f"{d}/all.txt", "rb").read()
cut = len(text) * 9 // 10
open(f"{d}/train.txt", "wb").write(text[:cut])
open(f"{d}/valid.txt", "wb").write(text[cut:])
EOF

common=(--set run.overwrite=true --set chunk.enabled=true --set checkpoint.at_end=false --set logging.log_every=1
        --set precision.dtype="${DTYPE:-fp32}")
# The optimizer settings of a mode.
mode_args() {
  case $1 in
    none-*) echo "--set optimizer.state_dtype=${1#none-} --set optimizer.master_weights=none" ;;
    *) echo "--set optimizer.state_dtype=$1" ;;
  esac
}
for mode in fp32 "${modes[@]}"; do
  # shellcheck disable=SC2046
  "$bin" --config configs/quickstart.yaml "${common[@]}" $(mode_args "$mode") \
    --set run.output_dir="$out/pretrain_$mode" --set checkpoint.export_hf=true > "$out/pretrain_$mode.log" 2>&1
done
for mode in fp32 "${modes[@]}"; do
  # shellcheck disable=SC2046
  "$bin" --config configs/quickstart.yaml "${common[@]}" $(mode_args "$mode") \
    --set run.output_dir="$out/finetune_$mode" --set model.init_from="$out/pretrain_fp32/hf" \
    --set data.train_path="$out/docs_text/train.txt" --set data.valid_path="$out/docs_text/valid.txt" \
    --set train.max_steps=300 --set train.eval_every=100 --set optimizer.lr=3.0e-4 \
    --set lr_schedule.warmup_steps=10 --set lr_schedule.min_lr=3.0e-5 > "$out/finetune_$mode.log" 2>&1
done

python3 - "$out" "${modes[@]}" <<'EOF'
import json, sys
out, modes = sys.argv[1], sys.argv[2:]

def figures(run):
    losses, evals = [], []
    for line in open(f"{out}/{run}/metrics.jsonl"):
        r = json.loads(line)
        if "loss" in r and "step" in r and not r.get("summary"):
            losses.append(r["loss"])
        if r.get("eval_loss") is not None:
            evals.append(r["eval_loss"])
    return sum(losses[-50:]) / len(losses[-50:]), evals[-1]

for phase in ("pretrain", "finetune"):
    ref_train, ref_eval = figures(f"{phase}_fp32")
    print(f"{phase:8s} fp32  train {ref_train:.4f}  eval {ref_eval:.4f}")
    for mode in modes:
        train, ev = figures(f"{phase}_{mode}")
        print(f"{phase:8s} {mode:5s} train {train:.4f} ({(train - ref_train) / ref_train:+.2%})  "
              f"eval {ev:.4f} ({(ev - ref_eval) / ref_eval:+.2%})")
EOF
