#!/usr/bin/env python3
"""Benchmark (not a test): ps_train LoRA vs PEFT + PyTorch eager on the same small Llama
(issue #24 §4).

One random-weight LlamaForCausalLM folder (save_pretrained, fp32) is the base of both
sides; LoRA r/alpha on the same target modules, AdamW over the adapters alone, the same
batch, sequence length, step count and thread count, random tokens, fp32 on the CPU.
Each side runs in a process of its own (so each one's peak resident memory is its own:
/usr/bin/time's maximum RSS), alternately (ps, peft, ps, peft), and the best throughput
of each is kept. Throughput as ps_train measures it: tokens over the summed wall time of
every step but the first. ps_train runs its plain path unless --ps-set chunk.enabled=true.

  source tools/python_peer_env.sh && pip install --no-deps peft accelerate
  python3 tools/bench_lora.py --steps 20 [--threads 2] [--ps-train PATH]

The last line printed is a JSON object (ps_tokens_per_s, peft_tokens_per_s, ratio, peak
RSS of each).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LR, BETAS, EPS, CLIP = 2e-4, (0.9, 0.999), 1e-8, 1.0


def make_base(folder, a):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=a.vocab_size, hidden_size=a.n_embd, intermediate_size=a.intermediate_size,
                         num_hidden_layers=a.n_layer, num_attention_heads=a.n_head, num_key_value_heads=a.kv_heads,
                         max_position_embeddings=a.seq_len, tie_word_embeddings=False, rope_theta=10000.0)
    LlamaForCausalLM(config).save_pretrained(folder)


def peft_side(a):
    """Runs in a child process: PEFT + eager, prints one JSON line."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    model = AutoModelForCausalLM.from_pretrained(a.base, dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=a.r, lora_alpha=a.alpha, lora_dropout=0.0, target_modules=TARGETS,
                                             task_type="CAUSAL_LM"))
    model.train()
    if a.checkpointing:
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=0.0)
    timed_s, loss = 0.0, float("nan")
    for step in range(a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        tokens = torch.randint(0, a.vocab_size, (a.batch_size, a.seq_len))
        loss_t = model(input_ids=tokens, labels=tokens).loss
        loss_t.backward()
        torch.nn.utils.clip_grad_norm_(params, CLIP)
        opt.step()
        loss = loss_t.item()
        if step > 0:
            timed_s += time.perf_counter() - t0
    tokens = (a.steps - 1) * a.batch_size * a.seq_len  # through the model, as ps_train counts them
    print(json.dumps({"tokens_per_s": tokens / timed_s, "final_loss": loss,
                      "trainable": sum(p.numel() for p in params)}))


def timed(cmd):
    """Runs `cmd` under /usr/bin/time; returns (stdout, stderr, peak RSS bytes)."""
    proc = subprocess.run(["/usr/bin/time", "-f", "maxrss_kb=%M"] + cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{cmd[0]} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    rss = [int(l.split("=")[1]) for l in proc.stderr.splitlines() if l.startswith("maxrss_kb=")][-1]
    return proc.stdout, proc.stderr, rss * 1024


def run_peft(a):
    cmd = [sys.executable, os.path.abspath(__file__), "--peft-child"] + sys.argv[1:] + ["--base", a.base]
    out, _, rss = timed(cmd)
    r = json.loads(out.strip().splitlines()[-1])
    r["peak_rss_bytes"] = rss
    return r


def run_ps(exe, a):
    out = tempfile.mkdtemp(prefix="bench_lora_")
    sets = {"model.type": "llama", "model.init_from": a.base, "lora.enabled": "true", "lora.r": a.r,
            "lora.alpha": a.alpha, "lora.target_modules": "[" + ", ".join(TARGETS) + "]",
            "data.format": "synthetic", "data.seq_len": a.seq_len, "run.device": "cpu", "run.threads": a.threads,
            "precision.dtype": "fp32", "logging.level": "warn", "run.output_dir": out, "train.max_steps": a.steps,
            "train.eval_steps": 1, "checkpoint.at_end": "false", "train.micro_batch_size": a.batch_size,
            "train.global_batch_size": a.batch_size, "train.grad_clip": CLIP, "optimizer.lr": LR,
            "optimizer.betas": f"[{BETAS[0]}, {BETAS[1]}]", "optimizer.weight_decay": 0.0,
            "lr_schedule.type": "constant", "model.activation_checkpointing": str(a.checkpointing).lower()}
    config = os.path.join(out, "bench.yaml")  # no shape keys: the base folder's config.json gives them
    with open(config, "w") as f:
        f.write("run: {name: bench_lora}\n")
    cmd = [exe, "--config", config] + [x for k, v in sets.items() for x in ("--set", f"{k}={v}")]
    cmd += [x for kv in a.ps_set for x in ("--set", kv)]
    try:
        _, _, rss = timed(cmd)
        with open(os.path.join(out, "metrics.jsonl")) as f:
            summary = [r for r in map(json.loads, f) if r.get("summary")][-1]
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {"tokens_per_s": summary["tokens_per_s"], "final_loss": summary.get("final_loss", float("nan")),
            "peak_rss_bytes": rss}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ps-train", help="default: <repo>/bazel-bin/trainer/ps_train")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--n-layer", type=int, default=8)
    ap.add_argument("--n-head", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=512)
    ap.add_argument("--intermediate-size", type=int, default=1536)
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--r", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32)
    ap.add_argument("--checkpointing", action="store_true", help="activation checkpointing on both sides")
    ap.add_argument("--ps-set", action="append", default=[], help="extra ps_train --set k=v (repeatable)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--peft-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--base", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.peft_child:
        return peft_side(a)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    exe = os.path.abspath(a.ps_train or os.path.join(root, "bazel-bin/trainer/ps_train"))
    os.chdir(root)
    tmp = tempfile.mkdtemp(prefix="bench_lora_base_")
    try:
        a.base = os.path.join(tmp, "base")
        make_base(a.base, a)
        rows = []
        for rep in range(1, a.repeats + 1):
            rows.append((f"ps_train #{rep}", run_ps(exe, a)))
            rows.append((f"peft     #{rep}", run_peft(a)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    import torch
    print(f"Llama {a.n_layer} layers x {a.n_embd}, {a.n_head} heads ({a.kv_heads} kv), vocab {a.vocab_size}; LoRA r "
          f"{a.r} on {len(TARGETS)} projections; batch {a.batch_size} x {a.seq_len}, {a.steps} steps, {a.threads} "
          f"threads, fp32 cpu, checkpointing {a.checkpointing}, torch {torch.__version__}")
    print(f"{'run':<12} {'tokens/s':>10} {'peak RSS MiB':>13} {'final loss':>11}")
    for name, r in rows:
        print(f"{name:<12} {r['tokens_per_s']:>10.0f} {r['peak_rss_bytes'] / 2**20:>13.0f} {r['final_loss']:>11.4f}")
    best = {side: max((r for n, r in rows if n.startswith(side)), key=lambda r: r["tokens_per_s"])
            for side in ("ps", "peft")}
    ratio = best["ps"]["tokens_per_s"] / best["peft"]["tokens_per_s"]
    print(f"best: ps_train {best['ps']['tokens_per_s']:.0f} tok/s, PEFT + eager {best['peft']['tokens_per_s']:.0f} "
          f"tok/s, ratio ps/peft {ratio:.3f}")
    print(json.dumps({"ps_tokens_per_s": round(best["ps"]["tokens_per_s"], 1),
                      "peft_tokens_per_s": round(best["peft"]["tokens_per_s"], 1), "ratio": round(ratio, 4),
                      "ps_peak_rss_bytes": min(r["peak_rss_bytes"] for n, r in rows if n.startswith("ps")),
                      "peft_peak_rss_bytes": min(r["peak_rss_bytes"] for n, r in rows if n.startswith("peft")),
                      "threads": a.threads, "steps": a.steps, "torch_version": torch.__version__,
                      "ps_set": a.ps_set, "checkpointing": a.checkpointing}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
