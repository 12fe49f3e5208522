#!/usr/bin/env python3
"""The chunk runtime's device checks as one experiment (not a test): every figure the
chunkmem and optim issues ask of a GPU, written as JSON (the file after each check, and
each check's result printed as it ends).

  python3 tools/device_checks.py --device cuda --out $OUT      # on the GPU machine
  python3 tools/device_checks.py --device cpu --quick --out /tmp/dc   # the same logic on the simulated tier

Experiments, each a few ps_train runs of the given binary (stdlib only):
  parity      a small GPT, fp32, 20 steps: plain, chunks resident, chunks evicting under a
              fixed budget (plain allocation, the arena, async prefetch) and a traced
              budget; the largest relative loss difference to plain per mode, evictions,
              peak device chunk bytes against the budget.
  throughput  --model (default gpt2-1.5b), bf16: plain vs chunks resident, alternated,
              best of --repeats: tokens/s and the ratio.
  largest     presets from large to small: the first that --plan says fits and that
              trains --largest-steps steps with offload (traced budget, bf16,
              checkpointing); its parameters, host chunk bytes and peak device bytes
              against the traced capacity.
  hybrid      --hybrid-model under a fixed device budget (--hybrid-budget-gib) it
              overflows: hybrid Adam vs all-CPU Adam, with the step breakdown
              (forward, backward, optimizer, Adam host, Adam device, chunk moves).
A run that fails or passes --run-timeout-s is recorded with its error, not fatal.
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

# Large to small: the search for the largest model that trains.
LARGEST_CANDIDATES = ["GPT3_18B", "GPT3_15B", "GPT3_12B", "GPT3_10B", "GPT3_8B", "GPT3_6B", "GPT2_4B",
                      "megatron_3.9B", "GPT2_2B", "gpt2-1.5b", "GPT2_1B", "gpt2-774m", "gpt2-350m", "gpt2-124m"]
# --quick (the simulated tier): shapes small enough for a 2-core CPU.
QUICK_MODEL = ["model.n_layer=4", "model.n_head=4", "model.n_embd=256", "model.n_positions=128",
               "model.vocab_size=4096"]
QUICK_LARGEST = {"q_large": ["model.n_layer=8", "model.n_embd=512"], "q_medium": ["model.n_layer=6"],
                 "q_small": ["model.n_layer=2"]}


def without_model_section(yaml_text):
    """The config text without its top-level `model:` section (block or flow style)."""
    out, skipping = [], False
    for line in yaml_text.splitlines(keepends=True):
        if line.startswith("model:"):
            skipping = True
            continue
        if skipping and (line.startswith((" ", "\t", "#")) or not line.strip()):
            continue
        skipping = False
        out.append(line)
    return "".join(out)


class Runner:
    def __init__(self, a, tmp):
        self.a, self.tmp, self.count = a, tmp, 0
        # Every check sets the model shape itself (a preset or all shape keys); ps_train
        # rejects a preset that disagrees with shape keys the file sets, so the base
        # config's own model section is left out.
        self.config = os.path.join(tmp, "base.yaml")
        with open(a.config) as f, open(self.config, "w") as out:
            out.write(without_model_section(f.read()))

    def common(self, steps):
        sets = ["data.format=synthetic", "data.train_path=", "data.valid_path=", "train.eval_every=0",
                "train.eval_steps=1", "logging.level=warn", "logging.log_every=1", f"train.max_steps={steps}",
                f"run.device={self.a.device}", "checkpoint.at_end=false"]  # no 18 GB checkpoints per run
        return sets + (["chunk.device_tier=simulated"] if self.a.device == "cpu" else [])

    def train(self, sets, plan=False):
        """Runs ps_train; returns (per-step metric lines, summary line) or raises RuntimeError."""
        self.count += 1
        out = os.path.join(self.tmp, f"run{self.count}")
        args = [self.a.ps_train, "--config", self.config, "--set", f"run.output_dir={out}"]
        for s in sets:
            args += ["--set", s]
        if plan:
            args.append("--plan")
        p = subprocess.run(args, capture_output=True, text=True, timeout=self.a.run_timeout_s)
        if plan:
            return p.returncode == 0, p.stdout
        if p.returncode != 0:
            raise RuntimeError((p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1])
        lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
        return [l for l in lines if "loss" in l and "step" in l], lines[-1]

    def attempt(self, sets):
        try:
            return self.train(sets), None
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            return None, str(e)[-400:]


def chunk_bytes(steps, key):
    return max((l.get(key, 0) for l in steps), default=0)


def parity(r):
    base = r.common(20) + ["model.n_layer=4", "model.n_embd=128", "model.n_head=4", "model.vocab_size=256",
                           "model.n_positions=128", "data.seq_len=128", "train.micro_batch_size=8",
                           "train.global_batch_size=8"]
    chunk = ["chunk.enabled=true", "chunk.size_elements=100000"]
    budget = 4 * 100000 * 4  # four fp32 compute chunks of nine (a block's three + the tied embedding's)
    modes = {"plain": [], "resident": chunk,
             "evicting": chunk + [f"chunk.device_budget_bytes={budget}"],
             "evicting_arena": chunk + [f"chunk.device_budget_bytes={budget}", "chunk.device_arena=true"],
             "evicting_async": chunk + [f"chunk.device_budget_bytes={budget}", "chunk.async_prefetch=true"],
             "evicting_async_arena": chunk + [f"chunk.device_budget_bytes={budget}", "chunk.async_prefetch=true",
                                              "chunk.device_arena=true"],
             # On the CPU this model's activations peak near 38 MB; 41 MB leaves the chunks ~3 MB of 3.6.
             "traced": chunk + (["chunk.device_memory_bytes=41000000", "chunk.device_mem_ratio=1.0"]
                                if r.a.device == "cpu" else [])}
    out, plain = {}, None
    for mode, sets in modes.items():
        res, err = r.attempt(base + sets)
        if err:
            out[mode] = {"error": err}
            continue
        steps, _ = res
        losses = [l["loss"] for l in steps]
        if mode == "plain":
            plain = losses
        worst = max(abs(a - b) / abs(b) for a, b in zip(losses, plain)) if plain else None
        out[mode] = {"max_rel_loss_diff": worst, "evictions": steps[-1].get("evictions", 0),
                     "peak_device_chunk_bytes": chunk_bytes(steps, "peak_device_chunk_bytes"),
                     "budget_bytes": budget if "evicting" in mode else None,
                     "peak_device_total_bytes": chunk_bytes(steps, "peak_device_total_bytes")}
    return out


def model_sets(a, name):
    return list(QUICK_MODEL) if a.quick else [f"model.preset={name}"]


def throughput(r):
    a = r.a
    base = r.common(a.steps) + model_sets(a, a.model) + [
        "precision.dtype=bf16", f"train.micro_batch_size={a.micro_batch}", f"train.global_batch_size={a.micro_batch}",
        f"data.seq_len={a.seq_len}", "logging.step_breakdown=true"]
    modes = {"plain": [], "resident": ["chunk.enabled=true", "chunk.size_elements=auto"]}
    best = {m: None for m in modes}
    for _ in range(a.repeats):
        for mode, sets in modes.items():
            res, err = r.attempt(base + sets)
            if err:
                best[mode] = best[mode] or {"error": err}
                continue
            steps, summary = res
            row = {"tokens_per_s": summary["tokens_per_s"], "final_loss": summary["final_loss"],
                   "evictions": steps[-1].get("evictions"), "step_breakdown_ms": breakdown(steps)}
            if not best[mode] or "error" in best[mode] or row["tokens_per_s"] > best[mode]["tokens_per_s"]:
                best[mode] = row
    if all("tokens_per_s" in (b or {}) for b in best.values()):
        best["resident_over_plain"] = best["resident"]["tokens_per_s"] / best["plain"]["tokens_per_s"]
    return best


def breakdown(steps):
    keys = ["step_ms", "forward_ms", "backward_ms", "optimizer_ms", "adam_host_ms", "adam_device_ms", "chunk_move_ms"]
    tail = steps[1:] or steps  # the first step includes warm-up
    return {k: sum(l[k] for l in tail) / len(tail) for k in keys if all(k in l for l in tail)}


def largest(r):
    a = r.a
    candidates = ({n: QUICK_MODEL + s for n, s in QUICK_LARGEST.items()} if a.quick
                  else {n: [f"model.preset={n}"] for n in LARGEST_CANDIDATES})
    base = r.common(a.largest_steps) + ["chunk.enabled=true", "chunk.size_elements=auto", "precision.dtype=bf16",
                                        "model.activation_checkpointing=true", "train.micro_batch_size=1",
                                        "train.global_batch_size=1", f"data.seq_len={a.seq_len}"]
    if a.device == "cpu":
        base.append(f"chunk.device_memory_bytes={a.quick_device_bytes}")
    tried = []
    for name, sets in candidates.items():
        fits, plan = r.train(base + sets, plan=True)
        if not fits:
            tried.append({"model": name, "plan": "does not fit"})
            continue
        res, err = r.attempt(base + sets)
        if err:
            tried.append({"model": name, "error": err})
            continue
        steps, summary = res
        return {"model": name, "params": summary["params"], "tokens_per_s": summary["tokens_per_s"],
                "host_chunk_bytes": steps[-1]["host_chunk_bytes"],
                "peak_device_total_bytes": chunk_bytes(steps, "peak_device_total_bytes"),
                "peak_device_chunk_bytes": chunk_bytes(steps, "peak_device_chunk_bytes"),
                "non_model_peak_bytes": chunk_bytes(steps, "non_model_peak_bytes"),
                "evictions": steps[-1]["evictions"], "tried_before": tried}
    return {"error": "nothing trained", "tried": tried}


def hybrid(r):
    a = r.a
    budget = int(a.hybrid_budget_gib * 2**30) if not a.quick else 12_000_000
    base = r.common(a.steps) + model_sets(a, a.hybrid_model) + [
        "chunk.enabled=true", "chunk.size_elements=auto" if not a.quick else "chunk.size_elements=300000",
        "precision.dtype=bf16", f"train.micro_batch_size={a.micro_batch}", f"train.global_batch_size={a.micro_batch}",
        f"data.seq_len={a.seq_len}", f"chunk.device_budget_bytes={budget}", "logging.step_breakdown=true"]
    out = {"device_budget_bytes": budget}
    for mode, sets in {"hybrid": [], "all_cpu": ["optimizer.hybrid_adam=false"]}.items():
        res, err = r.attempt(base + sets)
        if err:
            out[mode] = {"error": err}
            continue
        steps, summary = res
        out[mode] = {"tokens_per_s": summary["tokens_per_s"], "adam_device_chunks": steps[-1]["adam_device_chunks"],
                     "adam_host_chunks": steps[-1]["adam_host_chunks"], "step_breakdown_ms": breakdown(steps),
                     "evictions": steps[-1]["evictions"], "final_loss": summary["final_loss"]}
    if "tokens_per_s" in out.get("hybrid", {}) and "tokens_per_s" in out.get("all_cpu", {}):
        out["hybrid_over_all_cpu"] = out["hybrid"]["tokens_per_s"] / out["all_cpu"]["tokens_per_s"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ps-train", default="bazel-bin/trainer/ps_train")
    ap.add_argument("--config", default="configs/quickstart.yaml", help="base config; the checks override it")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--quick", action="store_true", help="small shapes for the simulated tier")
    ap.add_argument("--out", default=".", help="folder for device_checks.json")
    ap.add_argument("--only", default="parity,throughput,largest,hybrid")
    ap.add_argument("--model", default="gpt2-1.5b")
    ap.add_argument("--hybrid-model", default="gpt2-1.5b")
    ap.add_argument("--hybrid-budget-gib", type=float, default=6.0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--largest-steps", type=int, default=3)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--run-timeout-s", type=int, default=300)
    ap.add_argument("--quick-device-bytes", type=int, default=60_000_000)
    a = ap.parse_args()
    if a.quick:
        a.seq_len, a.micro_batch, a.steps = min(a.seq_len, 128), min(a.micro_batch, 4), min(a.steps, 6)
    checks = {"parity": parity, "throughput": throughput, "largest": largest, "hybrid": hybrid}
    result = {"device": a.device, "quick": a.quick, "ps_train": a.ps_train,
              "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    os.makedirs(a.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        r = Runner(a, tmp)
        for name in a.only.split(","):
            t0 = time.time()
            result[name] = checks[name](r)
            result[name + "_s"] = round(time.time() - t0, 1)
            with open(os.path.join(a.out, "device_checks.json"), "w") as f:
                json.dump(result, f, indent=1)  # after each check: a time-out keeps what was done
            print(f"## {name} ({result[name + '_s']} s)\n{json.dumps(result[name], indent=1)}", flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
