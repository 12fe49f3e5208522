#!/usr/bin/env python3
"""Benchmark (not a test): gradient accumulation with chunks against plain LibTorch and
against one micro-batch per step (issue #9 §1; docs/chunkmem.md, "Gradients").

For each case (model, micro-batch, k micro-batches per step), bf16, with the step
breakdown, best of --repeats:
  plain        chunk.enabled=false, global batch = micro x k
  chunks_k     chunks (traced budget, hybrid Adam), global batch = micro x k
  chunks_kv    chunks_k with train.accumulation_schedule: vertical (needs --checkpointing)
  chunks_1     chunks, global batch = micro (one micro-batch per step)
and the goal: forward+backward of a chunks_k step <= 1.1 x k x that of a chunks_1 step
(`goal_ratio` = the left side / (k x chunks_1's), met when <= 1.1; `goal_ratio_vertical`
the same for chunks_kv), with the grad path's
counters per step (device-to-host copies, waits, grad flushes, per-parameter copies).
A run that fails (plain GPT2_4B may not fit) is recorded with its error.

  tools/gpu_run.sh python3 tools/bench_accum.py --ps-train .device/ps_train --out $OUT
  ... --modes chunks_k,chunks_kv,chunks_1 --checkpointing   # horizontal against vertical
  python3 tools/bench_accum.py --device cpu --quick --out /tmp/ba   # logic check, simulated tier
"""
import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import device_checks  # noqa: E402  (Runner, breakdown)

CASES = [("gpt2-1.5b", 8, 2), ("GPT2_4B", 8, 4)]
COUNTERS = ["d2h_copies", "chunk_syncs", "grad_flushes", "grad_host_fallbacks", "evictions", "fetches"]


def per_step(steps, key):
    """Mean per-step increase of a cumulative counter after the warm-up step."""
    vals = [l[key] for l in steps if key in l]
    return (vals[-1] - vals[0]) / (len(vals) - 1) if len(vals) > 1 else None


def run_case(r, model, micro, k):
    a = r.a
    base = r.common(a.steps) + device_checks.model_sets(a, model) + [
        "precision.dtype=bf16", f"train.micro_batch_size={micro}", f"data.seq_len={a.seq_len}",
        "logging.step_breakdown=true"] + (["model.activation_checkpointing=true"] if a.checkpointing else [])
    chunk = ["chunk.enabled=true", "chunk.size_elements=auto"] + (
        [f"chunk.device_memory_bytes={a.quick_device_bytes}"] if a.device == "cpu" else [])
    modes = {"plain": [f"train.global_batch_size={micro * k}"],
             "chunks_k": chunk + [f"train.global_batch_size={micro * k}"],
             "chunks_kv": chunk + [f"train.global_batch_size={micro * k}", "train.accumulation_schedule=vertical"],
             "chunks_1": chunk + [f"train.global_batch_size={micro}"]}
    modes = {m: s for m, s in modes.items() if m in a.modes.split(",")}
    out = {}
    for _ in range(a.repeats):
        for mode, sets in modes.items():
            res, err = r.attempt(base + sets)
            if err:
                out.setdefault(mode, {"error": err})
                continue
            steps, summary = res
            row = {"tokens_per_s": summary["tokens_per_s"], "step_breakdown_ms": device_checks.breakdown(steps)}
            if mode != "plain":
                row["per_step"] = {c: per_step(steps, c) for c in COUNTERS}
            if "tokens_per_s" not in out.get(mode, {}) or row["tokens_per_s"] > out[mode]["tokens_per_s"]:
                out[mode] = row
    fb = lambda m: sum(out[m]["step_breakdown_ms"].get(x, 0) for x in ("forward_ms", "backward_ms"))
    if all("step_breakdown_ms" in out.get(m, {}) for m in ("chunks_k", "chunks_1")):
        out["goal_ratio"] = fb("chunks_k") / (k * fb("chunks_1"))
        out["goal_met"] = out["goal_ratio"] <= 1.1
    if all("step_breakdown_ms" in out.get(m, {}) for m in ("chunks_kv", "chunks_1")):
        out["goal_ratio_vertical"] = fb("chunks_kv") / (k * fb("chunks_1"))
    if all("tokens_per_s" in out.get(m, {}) for m in ("plain", "chunks_k")):
        out["chunks_over_plain"] = out["chunks_k"]["tokens_per_s"] / out["plain"]["tokens_per_s"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ps-train", default="bazel-bin/trainer/ps_train")
    ap.add_argument("--config", default="configs/quickstart.yaml", help="base config; the cases override it")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--quick", action="store_true", help="small shapes for the simulated tier")
    ap.add_argument("--out", default=".")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--modes", default="plain,chunks_k,chunks_1",
                    help="which of plain,chunks_k,chunks_kv,chunks_1 to run")
    ap.add_argument("--checkpointing", action="store_true", help="model.activation_checkpointing in every mode")
    ap.add_argument("--cases", help="model:micro:k,... (default: gpt2-1.5b:8:2,GPT2_4B:8:4)")
    ap.add_argument("--run-timeout-s", type=int, default=540)
    ap.add_argument("--quick-device-bytes", type=int, default=60_000_000)
    a = ap.parse_args()
    cases = CASES if not a.cases else [(m, int(b), int(k)) for m, b, k in (c.split(":") for c in a.cases.split(","))]
    if a.quick:
        a.seq_len, a.steps = min(a.seq_len, 128), min(a.steps, 4)
        cases = [("quick", 2, 2), ("quick", 2, 4)]
    result = {"device": a.device, "quick": a.quick, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    os.makedirs(a.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        r = device_checks.Runner(a, tmp)
        for model, micro, k in cases:
            name = f"{model}_micro{micro}_x{k}"
            t0 = time.time()
            result[name] = run_case(r, model, micro, k)
            result[name + "_s"] = round(time.time() - t0, 1)
            with open(os.path.join(a.out, "bench_accum.json"), "w") as f:
                json.dump(result, f, indent=1)
            print(f"## {name}\n{json.dumps(result[name], indent=1)}", flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
