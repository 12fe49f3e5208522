#!/usr/bin/env python3
"""Benchmark (not a test): ps_train throughput with the chunk runtime vs without, one run.

Three modes of the same config, alternated (plain, resident, evicting, plain, ...) so
they share the machine's state, best of `--repeats` each:
  plain     chunk.enabled=false
  resident  chunk.enabled=true, unlimited device budget (no eviction); after warm-up
            every chunk updates on the (simulated) device path of the hybrid Adam
  resident_cpu_adam  the same with optimizer.hybrid_adam=false: every chunk updates
            with the SIMD CPU kernels
  evicting  chunk.enabled=true, device budget of --evict-chunks compute chunks
  evicting_async  the same with chunk.async_prefetch=true (prefetch copies on a worker
            thread of the simulated tier)
Uses only the standard library and the ps_train binary.

  python3 tools/bench_chunks.py [--steps 100] [--threads N] [--ps-train PATH]

The last line printed is a JSON object with tokens/s per mode and the ratios to plain.
"""
import argparse
import json
import os
import subprocess
import tempfile


def run(ps_train, config, overrides, out_dir):
    args = [ps_train, "--config", config, "--set", f"run.output_dir={out_dir}", "--set", "checkpoint.at_end=false"]
    for o in overrides:
        args += ["--set", o]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lines = [json.loads(l) for l in open(os.path.join(out_dir, "metrics.jsonl"))]
    summary = lines[-1]
    steps = [l for l in lines if "evictions" in l]
    return summary["tokens_per_s"], (steps[-1]["evictions"] if steps else 0), summary["final_loss"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ps-train", default="bazel-bin/trainer/ps_train")
    ap.add_argument("--config", default="configs/quickstart.yaml")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--chunk-elements", type=int, default=100000)
    ap.add_argument("--evict-chunks", type=int, default=4, help="device budget in compute chunks")
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    common = [f"train.max_steps={a.steps}", f"run.threads={a.threads}", "train.eval_every=0", "train.eval_steps=1",
              "data.format=synthetic", "data.train_path=", "data.valid_path=", "logging.level=warn",
              f"logging.log_every={a.steps}"]
    chunk = ["chunk.enabled=true", f"chunk.size_elements={a.chunk_elements}"]
    budget = a.evict_chunks * a.chunk_elements * 4  # fp32 compute chunks
    modes = {"plain": common, "resident": common + chunk,
             "resident_cpu_adam": common + chunk + ["optimizer.hybrid_adam=false"],
             "evicting": common + chunk + [f"chunk.device_budget_bytes={budget}"],
             "evicting_async": common + chunk + [f"chunk.device_budget_bytes={budget}", "chunk.async_prefetch=true"]}
    best = {m: (0.0, 0, 0.0) for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.repeats):
            for mode, overrides in modes.items():
                tps, evictions, loss = run(a.ps_train, a.config, overrides, os.path.join(tmp, f"{mode}{r}"))
                print(f"{mode:17s} #{r + 1}: {tps:9.0f} tok/s  evictions {evictions:6d}  final loss {loss:.5f}")
                if tps > best[mode][0]:
                    best[mode] = (tps, evictions, loss)
    plain = best["plain"][0]
    result = {"plain_tokens_per_s": round(plain, 1),
              "resident_tokens_per_s": round(best["resident"][0], 1),
              "resident_cpu_adam_tokens_per_s": round(best["resident_cpu_adam"][0], 1),
              "evicting_tokens_per_s": round(best["evicting"][0], 1),
              "resident_cpu_adam_ratio": round(best["resident_cpu_adam"][0] / plain, 4),
              "resident_ratio": round(best["resident"][0] / plain, 4),
              "evicting_ratio": round(best["evicting"][0] / plain, 4),
              "evicting_async_tokens_per_s": round(best["evicting_async"][0], 1),
              "evicting_async_ratio": round(best["evicting_async"][0] / plain, 4),
              "evictions": best["evicting"][1], "evict_budget_bytes": budget,
              "same_final_loss": len({round(b[2], 5) for b in best.values()}) == 1,
              "steps": a.steps, "threads": a.threads, "config": a.config}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
