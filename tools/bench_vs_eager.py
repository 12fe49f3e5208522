#!/usr/bin/env python3
"""Benchmark (not a test): ps_train vs the same GPT or Llama trained in PyTorch eager
(and, with --compile, under torch.compile).

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

A Llama preset (issue #23: llama-3.2-1b bf16 against eager and torch.compile, MFU against
the card's dense bf16 peak; 989 TFLOPS for an H100 or H200 SXM):

  tools/gpu_run.sh python3 tools/bench_vs_eager.py --device cuda --dtype bf16 \
      --preset llama-3.2-1b --seq-len 2048 --batch-size 4 --steps 12 --compile --peak-tflops 989 \
      --ps-train .device/ps_train

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
# model.type llama presets (models/llama_config.cc): n_layer, n_head, n_kv_head, n_embd, head_dim,
# intermediate_size, vocab_size, rms_norm_eps, rope_theta, tied, max_position_embeddings. ps_train's side takes the
# preset itself (rope scaling included); the eager side rotates with plain rope_theta
# frequencies (the same FLOPs).
LLAMA_PRESETS = {"smollm2-135m": (30, 9, 3, 576, 64, 1536, 49152, 1e-5, 100000.0, True, 8192),
                 "llama-3.2-1b": (16, 32, 8, 2048, 64, 8192, 128256, 1e-5, 500000.0, True, 131072),
                 "llama-3.2-3b": (28, 24, 8, 3072, 128, 8192, 128256, 1e-5, 500000.0, True, 131072),
                 "llama-3.1-8b": (32, 32, 8, 4096, 128, 14336, 128256, 1e-5, 500000.0, False, 131072),
                 "qwen3-0.6b": (28, 16, 8, 1024, 128, 3072, 151936, 1e-6, 1e6, True, 40960)}
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


class RmsNorm(nn.Module):  # models/llama_layers.h: normalise in fp32, cast back, then scale
    def __init__(self, width, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(width)), eps

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotate(x, cos, sin):  # HF's split halves
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class LlamaBlock(nn.Module):  # models/llama_layers.cc: GQA through SDPA, SwiGLU, no biases
    def __init__(self, m):
        super().__init__()
        c, hd = m["n_embd"], m["head_dim"]
        self.n_head, self.n_kv, self.hd = m["n_head"], m["n_kv_head"], hd
        self.input_layernorm = RmsNorm(c, m["eps"])
        self.post_attention_layernorm = RmsNorm(c, m["eps"])
        self.q_proj = nn.Linear(c, self.n_head * hd, bias=False)
        self.k_proj = nn.Linear(c, self.n_kv * hd, bias=False)
        self.v_proj = nn.Linear(c, self.n_kv * hd, bias=False)
        self.o_proj = nn.Linear(self.n_head * hd, c, bias=False)
        self.gate_proj = nn.Linear(c, m["intermediate_size"], bias=False)
        self.up_proj = nn.Linear(c, m["intermediate_size"], bias=False)
        self.down_proj = nn.Linear(m["intermediate_size"], c, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, self.n_head, self.hd).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.n_kv, self.hd).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.n_kv, self.hd).transpose(1, 2)
        q, k = rotate(q, cos.to(q.dtype), sin.to(q.dtype)), rotate(k, cos.to(k.dtype), sin.to(k.dtype))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.n_kv != self.n_head)
        x = x + self.o_proj(y.transpose(1, 2).reshape(B, T, -1))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


def init_llama_parameter(name, p):  # norms 1, the rest N(0, INIT_STD)
    with torch.no_grad():
        p.fill_(1.0) if "norm" in name else p.normal_(0.0, INIT_STD)


def rope_inv_freq(m):  # fp32 rotary frequencies of plain rope_theta
    return 1.0 / (m["rope_theta"] ** (torch.arange(0, m["head_dim"], 2, dtype=torch.float32) / m["head_dim"]))


def llama_shape(preset, seq_len):
    """A LLAMA_PRESETS entry as the model dict of Llama (and of ps_train's --set keys)."""
    n_layer, n_head, n_kv, n_embd, head_dim, inter, vocab, eps, theta, tied, positions = LLAMA_PRESETS[preset]
    return {"kind": "llama", "preset": preset, "n_layer": n_layer, "n_head": n_head, "n_kv_head": n_kv,
            "n_embd": n_embd, "head_dim": head_dim, "intermediate_size": inter, "vocab_size": vocab, "eps": eps,
            "rope_theta": theta, "tied": tied, "max_positions": positions, "n_positions": positions,
            "seq_len": seq_len}


class Llama(nn.Module):  # embed_tokens, layers, norm, lm_head (tied: the embedding)
    def __init__(self, m):
        super().__init__()
        self.embed_tokens = nn.Embedding(m["vocab_size"], m["n_embd"])
        self.layers = nn.ModuleList(LlamaBlock(m) for _ in range(m["n_layer"]))
        self.norm = RmsNorm(m["n_embd"], m["eps"])
        self.lm_head = None if m["tied"] else nn.Linear(m["n_embd"], m["vocab_size"], bias=False)
        self.register_buffer("inv_freq", rope_inv_freq(m), persistent=False)
        for name, p in self.named_parameters():
            init_llama_parameter(name, p)

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1), device=idx.device, dtype=torch.float32)
        freqs = torch.outer(pos, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        x = self.embed_tokens(idx)
        for block in self.layers:
            x = block(x, cos, sin)
        w = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(self.norm(x), w)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))


def flops_per_token(m, n_params):  # trainer/logging/metrics.h: 6 N + 12 L A T, A = the queries' width
    width = m["n_head"] * m["head_dim"] if m["kind"] == "llama" else m["n_embd"]
    return 6.0 * n_params + 12.0 * m["n_layer"] * width * m["seq_len"]


def lr_at(step, steps):  # optim/lr_schedule.cc, cosine with warm-up
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    progress = min(1.0, (step - WARMUP) / max(1, steps - WARMUP))
    return MIN_LR + 0.5 * (LR - MIN_LR) * (1 + math.cos(math.pi * progress))


def run_eager(m, batch, steps, device="cpu", dtype="fp32", compile_model=False):
    torch.manual_seed(1234)
    model = (Llama(m) if m["kind"] == "llama" else Gpt(m)).to(device).train()
    params = list(model.parameters())
    forward = torch.compile(model) if compile_model else model  # compiles in the untimed first step
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
            loss_t = forward(tokens[:, :-1], tokens[:, 1:])
        loss_t.backward()
        torch.nn.utils.clip_grad_norm_(params, CLIP)
        opt.step()
        loss = loss_t.item()
        if step > 0 or steps == 1:
            timed_s += time.perf_counter() - t0
    timed_steps = max(1, steps - 1)
    n_params = sum(p.numel() for p in params)
    del model, forward, opt, params
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
            "data.seq_len": m["seq_len"]}
    sets.update({"model.n_layer": m["n_layer"], "model.n_head": m["n_head"], "model.n_embd": m["n_embd"],
                 "model.n_positions": m["n_positions"], "model.vocab_size": m["vocab_size"]})
    if m["kind"] == "llama":  # the preset fills the other keys; those above agree with it
        sets.update({"model.type": "llama", "model.preset": m["preset"]})
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
    ap.add_argument("--preset", choices=sorted(PRESETS) + sorted(LLAMA_PRESETS),
                    help="model shape (overrides --n-*, --vocab-size; a GPT-2 preset also --seq-len); a Llama "
                         "preset runs ps_train with model.type=llama")
    ap.add_argument("--compile", action="store_true", help="also run the eager model under torch.compile")
    ap.add_argument("--peak-tflops", type=float, default=0.0,
                    help="the device's dense peak (e.g. 989 for an H100/H200 in bf16): prints MFU")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="bf16: autocast, fp32 weights")
    ap.add_argument("--ps-set", action="append", default=[], help="extra ps_train --set k=v (repeatable)")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    m = {"kind": "gpt", "preset": args.preset}
    if args.preset in LLAMA_PRESETS:
        m = llama_shape(args.preset, args.seq_len)
        args.n_layer, args.n_head, args.n_embd, args.vocab_size = (m[k] for k in ("n_layer", "n_head", "n_embd",
                                                                                   "vocab_size"))
    elif args.preset:
        args.n_layer, args.n_head, args.n_embd, args.seq_len, args.vocab_size = PRESETS[args.preset]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    exe = os.path.abspath(args.ps_train or os.path.join(root, "bazel-bin/trainer/ps_train"))
    os.chdir(root)  # CONFIG is relative to the repo root
    m.update({"n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd,
              "n_positions": m.get("max_positions", args.seq_len), "vocab_size": args.vocab_size, "seq_len": args.seq_len})
    torch.set_num_threads(args.threads)

    rows = []
    for rep in range(1, args.repeats + 1):
        ps = run_ps(exe, m, args.batch_size, args.steps, args.threads, args.device, args.dtype, args.ps_set)
        rows.append((f"ps_train #{rep}", ps["tokens_per_s"], ps["final_loss"], ps["params"]))
        eager = run_eager(m, args.batch_size, args.steps, args.device, args.dtype)
        rows.append((f"eager    #{rep}", eager["tokens_per_s"], eager["final_loss"], eager["params"]))
        if args.compile:
            comp = run_eager(m, args.batch_size, args.steps, args.device, args.dtype, compile_model=True)
            rows.append((f"compile  #{rep}", comp["tokens_per_s"], comp["final_loss"], comp["params"]))
    if len({r[3] for r in rows}) != 1:
        sys.exit(f"parameter counts differ, not the same model: {rows}")

    tokens_per_step = args.batch_size * args.seq_len
    flops = flops_per_token(m, rows[0][3])
    print(f"{m['kind']} {m} batch {args.batch_size}, {args.steps} steps, {args.threads} threads, "
          f"{args.dtype} {args.device}, torch {torch.__version__}")
    print(f"{'run':<12} {'tokens/s':>10} {'ms/step':>9} {'final loss':>11} {'TFLOPS':>8} {'MFU':>6}")
    for name, tps, loss, _ in rows:
        mfu = f"{tps * flops / 1e12 / args.peak_tflops:.3f}" if args.peak_tflops > 0 else "-"
        print(f"{name:<12} {tps:>10.0f} {1e3 * tokens_per_step / tps:>9.1f} {loss:>11.4f} "
              f"{tps * flops / 1e12:>8.2f} {mfu:>6}")
    best = {k: max(r[1] for r in rows if r[0].startswith(k)) for k in ("ps", "eager", "compile")
            if any(r[0].startswith(k) for r in rows)}
    best_ps, best_eager = best["ps"], best["eager"]
    print(f"best: ps_train {best_ps:.0f} tok/s, eager {best_eager:.0f} tok/s, "
          f"ratio ps/eager {best_ps / best_eager:.3f}"
          + (f", compile {best['compile']:.0f} tok/s, ps/compile {best_ps / best['compile']:.3f}"
             if "compile" in best else ""))
    mfu = {k: round(v * flops / 1e12 / args.peak_tflops, 4) for k, v in best.items()} if args.peak_tflops > 0 else {}
    print(json.dumps({"ps_tokens_per_s": round(best_ps, 1), "eager_tokens_per_s": round(best_eager, 1),
                      "compile_tokens_per_s": round(best["compile"], 1) if "compile" in best else None,
                      "ratio": round(best_ps / best_eager, 4), "flops_per_token": flops, "mfu": mfu,
                      "threads": args.threads,
                      "steps": args.steps, "torch_version": torch.__version__,
                      "device": args.device, "dtype": args.dtype, "ps_set": args.ps_set,
                      "model": {**m, "batch_size": args.batch_size}}))


if __name__ == "__main__":
    main()
