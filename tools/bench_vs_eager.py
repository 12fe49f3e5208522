#!/usr/bin/env python3
"""Benchmark (not a test): ps_train vs the same GPT trained in PyTorch eager.

Both sides use the same torch 2.11 build, the same machine, thread count, model, batch
and step count, random tokens; they run alternately (ps, eager, ps, eager) and the best
of each is kept. Throughput is measured as ps_train does: wall time of each step (data,
forward, cross-entropy, backward, clip_grad_norm_, AdamW step) summed over every step but
the first, tokens / time. ps_train runs its plain path (chunk.enabled=false) unless
--ps-set says otherwise.

  source tools/python_peer_env.sh     # makes `import torch` work (Python peer only)
  python3 tools/bench_vs_eager.py --steps 200 [--threads 2] [--ps-train PATH]      # CPU, fp32

On a GPU (issue #9 §6: the plain path against eager), fp32 weights with bf16 autocast on
both sides, the eager side with torch's fused AdamW (its fastest eager optimizer):

  tools/gpu_run.sh python3 tools/bench_vs_eager.py --device cuda --dtype bf16 \
      --preset gpt2-1.5b --batch-size 8 --steps 12 --ps-train .device/ps_train

The last line printed is a JSON object (ps_tokens_per_s, eager_tokens_per_s, ratio, ...).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# name: n_layer, n_head, n_embd, n_positions (= seq_len), vocab_size (models/gpt_config.cc)
PRESETS = {"gpt2-124m": (12, 12, 768, 1024, 50257), "gpt2-350m": (24, 16, 1024, 1024, 50257),
           "gpt2-774m": (36, 20, 1280, 1024, 50257), "gpt2-1.5b": (48, 25, 1600, 1024, 50257)}
CONFIG = "configs/quickstart.yaml"  # ps_train side; its optimizer and schedule are mirrored below
LR, MIN_LR, WARMUP, BETAS, EPS, WD, CLIP, INIT_STD = 3e-3, 3e-4, 20, (0.9, 0.95), 1e-8, 0.1, 1.0, 0.02


class Block(nn.Module):  # models/gpt.cc: pre-LN, causal SDPA, GELU (tanh)
    def __init__(self, m):
        super().__init__()
        c = m["n_embd"]
        self.n_head = m["n_head"]
        self.ln_1, self.ln_2 = nn.LayerNorm(c, eps=1e-5), nn.LayerNorm(c, eps=1e-5)
        self.c_attn, self.attn_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.c_fc, self.c_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in self.c_attn(self.ln_1(x)).split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


@torch.no_grad()
def init_parameter(name, p, n_layer):  # InitGptParameter (models/gpt.cc)
    if "ln_" in name:
        p.fill_(0.0 if name.endswith(".bias") else 1.0)
    elif name.endswith(".bias"):
        p.zero_()
    elif name.endswith("proj.weight"):  # both c_proj (attn + mlp)
        p.normal_(0.0, INIT_STD / math.sqrt(2 * n_layer))
    else:
        p.normal_(0.0, INIT_STD)


class Gpt(nn.Module):  # learned positions, LM head tied to wte
    def __init__(self, m):
        super().__init__()
        self.wte = nn.Embedding(m["vocab_size"], m["n_embd"])
        self.wpe = nn.Embedding(m["n_positions"], m["n_embd"])
        self.h = nn.ModuleList(Block(m) for _ in range(m["n_layer"]))
        self.ln_f = nn.LayerNorm(m["n_embd"], eps=1e-5)
        for name, p in self.named_parameters():
            init_parameter(name, p, m["n_layer"])

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def lr_at(step, steps):  # optim/lr_schedule.cc, cosine with warm-up
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    progress = min(1.0, (step - WARMUP) / max(1, steps - WARMUP))
    return MIN_LR + 0.5 * (LR - MIN_LR) * (1 + math.cos(math.pi * progress))


def run_eager(m, batch, steps, device="cpu", dtype="fp32"):
    torch.manual_seed(1234)
    model = Gpt(m).to(device).train()
    params = list(model.parameters())
    fused = {"fused": True} if device == "cuda" else {}
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": WD},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS, **fused)
    autocast = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=dtype == "bf16")
    timed_s, loss = 0.0, float("nan")
    for step in range(steps):
        t0 = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps)
        opt.zero_grad(set_to_none=True)
        tokens = torch.randint(0, m["vocab_size"], (batch, m["seq_len"] + 1), device=device)
        with autocast:
            loss_t = model(tokens[:, :-1], tokens[:, 1:])
        loss_t.backward()
        torch.nn.utils.clip_grad_norm_(params, CLIP)
        opt.step()
        loss = loss_t.item()
        if step > 0 or steps == 1:
            timed_s += time.perf_counter() - t0
    timed_steps = max(1, steps - 1)
    n_params = sum(p.numel() for p in params)
    del model, opt, params
    if device == "cuda":
        torch.cuda.empty_cache()  # leave the GPU to the next ps_train run
    return {"tokens_per_s": timed_steps * batch * m["seq_len"] / timed_s, "final_loss": loss,
            "params": n_params}


def run_ps(exe, m, batch, steps, threads, device="cpu", dtype="fp32", extra=()):
    out = tempfile.mkdtemp(prefix="bench_vs_eager_")
    sets = {"data.format": "synthetic", "data.train_path": "", "data.valid_path": "", "run.device": device, "run.threads": threads,
            "precision.dtype": dtype, "logging.level": "warn",
            "run.output_dir": out, "train.max_steps": steps, "train.eval_steps": 1, "checkpoint.at_end": "false",
            "train.micro_batch_size": batch, "train.global_batch_size": batch,
            "data.seq_len": m["seq_len"], "model.n_layer": m["n_layer"], "model.n_head": m["n_head"],
            "model.n_embd": m["n_embd"], "model.n_positions": m["n_positions"],
            "model.vocab_size": m["vocab_size"]}
    cmd = [exe, "--config", CONFIG] + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    cmd += [a for kv in extra for a in ("--set", kv)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"ps_train failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
        with open(os.path.join(out, "metrics.jsonl")) as f:
            summary = [r for r in map(json.loads, f) if r.get("summary")][-1]
    finally:
        shutil.rmtree(out, ignore_errors=True)
    assert summary["threads"] == threads, summary
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ps-train", help="default: <repo>/bazel-bin/trainer/ps_train")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--vocab-size", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=16, help="micro = global batch (sequences)")
    ap.add_argument("--preset", choices=sorted(PRESETS), help="model shape (overrides --n-*, --seq-len, --vocab-size)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="bf16: autocast, fp32 weights")
    ap.add_argument("--ps-set", action="append", default=[], help="extra ps_train --set k=v (repeatable)")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    if args.preset:
        args.n_layer, args.n_head, args.n_embd, args.seq_len, args.vocab_size = PRESETS[args.preset]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    exe = os.path.abspath(args.ps_train or os.path.join(root, "bazel-bin/trainer/ps_train"))
    os.chdir(root)  # CONFIG is relative to the repo root
    m = {"n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd,
         "n_positions": args.seq_len, "vocab_size": args.vocab_size, "seq_len": args.seq_len}
    torch.set_num_threads(args.threads)

    rows = []
    for rep in range(1, args.repeats + 1):
        ps = run_ps(exe, m, args.batch_size, args.steps, args.threads, args.device, args.dtype, args.ps_set)
        rows.append((f"ps_train #{rep}", ps["tokens_per_s"], ps["final_loss"], ps["params"]))
        eager = run_eager(m, args.batch_size, args.steps, args.device, args.dtype)
        rows.append((f"eager    #{rep}", eager["tokens_per_s"], eager["final_loss"], eager["params"]))
    if len({r[3] for r in rows}) != 1:
        sys.exit(f"parameter counts differ, not the same model: {rows}")

    tokens_per_step = args.batch_size * args.seq_len
    print(f"GPT {m} batch {args.batch_size}, {args.steps} steps, {args.threads} threads, "
          f"{args.dtype} {args.device}, torch {torch.__version__}")
    print(f"{'run':<12} {'tokens/s':>10} {'ms/step':>9} {'final loss':>11}")
    for name, tps, loss, _ in rows:
        print(f"{name:<12} {tps:>10.0f} {1e3 * tokens_per_step / tps:>9.1f} {loss:>11.4f}")
    best_ps = max(r[1] for r in rows if r[0].startswith("ps"))
    best_eager = max(r[1] for r in rows if r[0].startswith("eager"))
    print(f"best: ps_train {best_ps:.0f} tok/s, eager {best_eager:.0f} tok/s, "
          f"ratio ps/eager {best_ps / best_eager:.3f}")
    print(json.dumps({"ps_tokens_per_s": round(best_ps, 1), "eager_tokens_per_s": round(best_eager, 1),
                      "ratio": round(best_ps / best_eager, 4), "threads": args.threads,
                      "steps": args.steps, "torch_version": torch.__version__,
                      "device": args.device, "dtype": args.dtype, "ps_set": args.ps_set,
                      "model": {**m, "batch_size": args.batch_size}}))


if __name__ == "__main__":
    main()
