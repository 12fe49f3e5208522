#!/usr/bin/env python3
"""Kills a training run with SIGKILL at random moments, resumes it each time, and checks
that it logs bitwise the same losses as one uninterrupted run (issue: checkpoints).

  python3 tools/kill_resume_check.py                 # 200 quick-start steps, 20 kills
  python3 tools/kill_resume_check.py --kills 5 --steps 60 --set chunk.enabled=true

Runs the reference (uninterrupted) and the killed run with the same config, checkpoints
every --every steps (async saves on, as by default), metrics for every step. Each killed
process is restarted with the same command (checkpoint.resume: auto) until the run ends.
Prints the number of steps whose loss differs (exit 1 if any, or if a step is missing).
Needs a built binary (bazel build //trainer:ps_train) and the quick-start corpus
(python3 tools/make_corpus.py data_cache/quickstart).
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time


def losses(path):
    """step -> loss text as logged (the last occurrence wins: steps redone after a kill)."""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            rec = json.loads(line)  # a cut line would fail here: the trainer must drop it
            if "loss" in rec and "step" in rec:
                out[rec["step"]] = rec["loss"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="bazel-bin/trainer/ps_train")
    ap.add_argument("--config", default="configs/quickstart.yaml")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--every", type=int, default=5, help="checkpoint.every_steps")
    ap.add_argument("--out", default="runs/kill_resume_check")
    ap.add_argument("--seed", type=int, default=1, help="of the kill moments")
    ap.add_argument("--set", action="append", default=[], help="extra --set key=value for both runs")
    args = ap.parse_args()

    common = [args.binary, "--config", args.config, "--set", f"train.max_steps={args.steps}",
              "--set", f"checkpoint.every_steps={args.every}", "--set", "logging.log_every=1",
              "--set", "logging.level=warn", "--set", "train.eval_every=0"]
    for kv in args.set:
        common += ["--set", kv]
    shutil.rmtree(args.out, ignore_errors=True)
    ref_dir, kill_dir = os.path.join(args.out, "reference"), os.path.join(args.out, "killed")

    t0 = time.time()
    subprocess.run(common + ["--set", f"run.output_dir={ref_dir}"], check=True)
    ref_s = time.time() - t0
    print(f"reference: {args.steps} steps in {ref_s:.1f} s", flush=True)

    rng = random.Random(args.seed)
    kills, starts = 0, 0
    cmd = common + ["--set", f"run.output_dir={kill_dir}"]
    kill_metrics = os.path.join(kill_dir, "metrics.jsonl")

    def last_step():
        try:
            return max(losses(kill_metrics), default=0)
        except (OSError, ValueError):
            return 0

    step_s = ref_s / args.steps
    while True:
        starts += 1
        proc = subprocess.Popen(cmd)
        if kills >= args.kills:
            rc = proc.wait()
            break
        # Most kills land mid-training: after a random number of new steps (so before,
        # during or after a checkpoint write), at a random moment within a step; one in
        # five lands during start-up or the resume itself.
        before = last_step()
        during_startup = rng.random() < 0.2
        target = before + rng.randint(1, 2 * args.every + 2)
        t_start = time.time()
        finished = False
        while not finished:
            if proc.poll() is not None:
                finished = True
                break
            if during_startup and time.time() - t_start > rng.uniform(0.05, 1.0):
                break
            if not during_startup and last_step() >= target:
                time.sleep(rng.uniform(0.0, step_s))
                break
            time.sleep(0.005)
        if finished or proc.poll() is not None:
            rc = proc.wait()
            break  # finished before its kill moment
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        where = "during start-up" if during_startup else f"after step {last_step()}"
        print(f"kill {kills}/{args.kills} {where} (this attempt began at step {before})", flush=True)
    if rc != 0:
        print(f"ps_train exited with status {rc}", file=sys.stderr)
        return 1

    ref = losses(os.path.join(ref_dir, "metrics.jsonl"))
    got = losses(os.path.join(kill_dir, "metrics.jsonl"))
    missing = [s for s in ref if s not in got]
    mismatches = [s for s in ref if s in got and got[s] != ref[s]]
    for s in mismatches[:10]:
        print(f"step {s}: reference {ref[s]!r}, killed+resumed {got[s]!r}")
    print(f"{kills} kills, {starts} starts; steps compared: {len(ref)}; missing: {len(missing)}; "
          f"mismatches: {len(mismatches)}")
    if kills < args.kills:
        print(f"the run finished after {kills} of {args.kills} kills", file=sys.stderr)
    return 1 if mismatches or missing or len(ref) != args.steps or kills < args.kills else 0


if __name__ == "__main__":
    sys.exit(main())
