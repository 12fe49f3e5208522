#!/usr/bin/env python3
"""Reads a run's TensorBoard event files with TensorBoard's own reader (not a test).

Prints each scalar tag with its number of points, step range and last value, then
compares the curves with the run's metrics.jsonl: every logged step's loss, lr and
tokens/s, and every evaluation's loss and perplexity, must be in tb/ (as float32).
Exit status 1 when tb/ holds no event file, a default curve is missing, or a value
differs.

  python3 -m pip install tensorboard      # once; ps_train never needs it
  bazel-bin/trainer/ps_train --config configs/quickstart.yaml --set logging.tensorboard=true
  python3 tools/check_tensorboard.py runs/quickstart     # the run folder, or its tb/
  tensorboard --logdir runs/quickstart/tb                # the curves in a browser
"""
import argparse
import glob
import json
import math
import os
import struct
import sys

# metrics.jsonl key -> TensorBoard tag (trainer/train_loop.cc, TensorBoardTag and LogEval).
STEP_TAGS = {"loss": "train/loss", "lr": "train/lr", "tokens_per_s": "perf/tokens_per_s"}
EVAL_TAGS = {"eval_loss": "eval/loss", "eval_perplexity": "eval/perplexity"}


def as_float32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="the run's output folder (or its tb/ folder)")
    args = ap.parse_args()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb_dir = args.run if os.path.basename(os.path.normpath(args.run)) == "tb" else os.path.join(args.run, "tb")
    run_dir = os.path.dirname(os.path.normpath(tb_dir))
    files = sorted(glob.glob(os.path.join(tb_dir, "events.out.tfevents.*")))
    if not files:
        print(f"{tb_dir}: no event files (was logging.tensorboard on?)")
        return 1
    for f in files:
        print(f"{f}: {os.path.getsize(f)} bytes")

    acc = EventAccumulator(tb_dir, size_guidance={"scalars": 0})  # 0: keep every point
    acc.Reload()
    tags = sorted(acc.Tags()["scalars"])
    curves = {tag: acc.Scalars(tag) for tag in tags}
    print(f"{len(tags)} scalar tags")
    for tag in tags:
        pts = curves[tag]
        print(f"  {tag:32s} {len(pts):5d} points, steps {pts[0].step}..{pts[-1].step}, last {pts[-1].value:.6g}")

    failures = [f"missing tag {t}" for t in list(STEP_TAGS.values()) if t not in curves]
    metrics_path = os.path.join(run_dir, "metrics.jsonl")
    compared = 0
    if os.path.exists(metrics_path):
        by_tag = {tag: {p.step: p.value for p in pts} for tag, pts in curves.items()}
        with open(metrics_path) as f:
            for line in f:
                rec = json.loads(line)
                keys = STEP_TAGS if "loss" in rec else EVAL_TAGS if "eval_loss" in rec else {}
                for key, tag in keys.items():
                    if key not in rec or rec[key] is None:
                        continue
                    got = by_tag.get(tag, {}).get(rec["step"])
                    want = as_float32(rec[key])
                    compared += 1
                    if got is None or not math.isclose(got, want, rel_tol=1e-6):
                        failures.append(f"step {rec['step']} {tag}: tb {got}, metrics.jsonl {rec[key]}")
        print(f"{metrics_path}: {compared} values compared with tb/")
    for failure in failures:
        print("FAIL:", failure)
    print("ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
