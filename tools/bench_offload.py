#!/usr/bin/env python3
"""Benchmark (not a test): ps_train against the offload peers on one model and batch.

Issue #9 §8, issue #25. Runs, each in its own process (one at a time, so none sees
another's memory), the same model (tools/bench_vs_eager.py's: its GPT, learned positions,
pre-LN, GELU-tanh, tied head, causal SDPA; or with a Llama --preset its Llama, RMSNorm,
rotary, GQA, SwiGLU) with the same micro-batch, sequence length, AdamW (betas, eps,
weight decay) and clip 1.0 on random tokens, and prints one table with tokens/s (median
step after the first two), ms/step, peak GPU memory, peak resident host memory and the
ratio of ps_train to each peer. None of the peers is part of ps_train. Peers:

  eager      PyTorch eager, bf16 autocast, fp32 weights, fused AdamW (model must fit)
  compile    the same under torch.compile
  fsdp2      FSDP2 (fully_shard per block) with CPUOffloadPolicy, bf16 params (one rank)
  ds_zero2   DeepSpeed ZeRO-2, optimizer offloaded to the CPU (its CPU Adam), bf16
  ds_zero3   DeepSpeed ZeRO-3, parameters and optimizer offloaded to the CPU, bf16

ps_train runs with --set ps-set options on top of a shape-free base config (bf16, chunks
on, the model from --preset), e.g. `--ps-set optimizer.hybrid_adam=false` for "optimizer
on the host". --checkpointing turns activation checkpointing on in every runner.
--gpu-cap-gib caps every runner's GPU memory the same way (the peers' caching allocator
by torch.cuda.set_per_process_memory_fraction, ps_train's by chunk.device_memory_bytes),
as a smaller card would. --ds-nvme DIR puts the DeepSpeed peers' optimizer state in files
under DIR (ZeRO-Infinity's NVMe offload; DeepSpeed builds its async_io op with libaio).

DeepSpeed is not on the GPU machine and it has no network: fetch it here first (PyPI is
reachable here), into the git-ignored .device/wheels that travels with the checkout:

  python3 tools/bench_offload.py --fetch-deepspeed      # here; then carry .device/wheels

On the GPU machine the first ds_* run installs it into .device/pylib (pip --no-index
--no-deps --target; DeepSpeed's sdist with DS_BUILD_OPS=0 --no-build-isolation; its CPU
Adam JIT-compiles on first use with the machine's g++/nvcc). The goal commands of issue
#9 §8 (docs/benchmarks.md, "Offload peers"):

  tools/gpu_run.sh python3 tools/bench_offload.py --ps-train .device/ps_train \\
      --preset gpt2-1.5b --batch-size 8 --steps 12 --peers eager,compile,fsdp2,ds_zero2 \\
      --ps-set optimizer.hybrid_adam=false --out "$OUT/offload_1p5b.json"
  tools/gpu_run.sh python3 tools/bench_offload.py --ps-train .device/ps_train \\
      --preset GPT2_4B --batch-size 8 --steps 8 --checkpointing --peers ds_zero3 \\
      --out "$OUT/offload_4b.json"

Issue #25's peer: Llama 3.1 8B full fine-tune under a 24 GiB cap, ps_train with int8
moments and a 64 GiB host budget, against ZeRO-3 with CPU offload (--ds-nvme DIR: the
optimizer state on NVMe):

  tools/gpu_run.sh python3 tools/bench_offload.py --ps-train .device/ps_train \\
      --preset llama-3.1-8b --seq-len 2048 --batch-size 1 --steps 4 --checkpointing \\
      --gpu-cap-gib 24 --peers ds_zero3 --ps-set optimizer.state_dtype=int8 \\
      --ps-set chunk.host_budget_bytes=68719476736 --out "$OUT/ds8b.json"

The third goal, the largest model (at least 2x the largest DeepSpeed ZeRO-3 offload
trains on the same machine, PatrickStar's claim), is `--largest`: for each of --runners
it finds the largest model of --ladder (smallest first: presets or LAYERSxHEADSxWIDTH
shapes) that trains --steps steps, and prints each runner's largest with its tokens/s
and ps_train's ratio in parameters. ps_train asks its own `--plan` first (seconds per
shape) and runs the largest shape the plan admits, stepping down the ladder if that run
fails; every other runner climbs the ladder from the bottom and stops at its first
failure (out of memory, a timeout, an error). Each trial is its own process with
--timeout-s; --out is rewritten after every trial, so a command cut short keeps what
it measured, and --ladder can resume where it stopped:

  tools/gpu_run.sh python3 tools/bench_offload.py --ps-train .device/ps_train --largest \
      --runners ps_train,ds_zero3 --batch-size 1 --steps 3 --checkpointing \
      --ladder GPT2_4B,GPT3_6B,GPT3_8B,GPT3_10B,GPT3_11B --out "$OUT/largest.json"

On the CPU (no GPU here): `--device cpu --dtype fp32` runs ps_train, eager and compile
on a small model (the --n-* options), a check that the script itself works; `--largest
--device cpu --dtype fp32 --ladder 2x2x64,4x2x128 --runners ps_train,eager` with small
`chunk.host_budget_bytes` checks the ladder walk.
"""
import argparse
import contextlib
import glob
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WHEELS = os.path.join(ROOT, ".device", "wheels")
PYLIB = os.path.join(ROOT, ".device", "pylib")
DEEPSPEED = "deepspeed==0.19.8"
# Wheels DeepSpeed needs beyond what the GPU machine's Python 3.12 has (issue #9 §8);
# pydantic pins its pydantic-core, a cp312 manylinux wheel.
DEEPSPEED_WHEELS = ["hjson", "pydantic", "annotated-types", "typing-inspection", "typing-extensions",
                    "py-cpuinfo", "einops", "msgpack", "nvidia-ml-py", "wheel"]
# Shapes of models/gpt_config.cc: n_layer, n_head, n_embd, n_positions (= seq_len), vocab.
PRESETS = {"gpt2-124m": (12, 12, 768, 1024, 50257), "gpt2-350m": (24, 16, 1024, 1024, 50257),
           "gpt2-774m": (36, 20, 1280, 1024, 50257), "gpt2-1.5b": (48, 25, 1600, 1024, 50257),
           "GPT2_2B": (40, 16, 2048, 1024, 50257), "GPT2_4B": (64, 16, 2304, 1024, 50257),
           "GPT3_6B": (53, 16, 3072, 1024, 50257), "GPT3_8B": (72, 16, 3072, 1024, 50257),
           "GPT3_10B": (50, 16, 4096, 1024, 50257), "GPT3_11B": (55, 16, 4096, 1024, 50257),
           "GPT3_12B": (60, 16, 4096, 1024, 50257), "GPT3_13B": (65, 16, 4096, 1024, 50257),
           "GPT3_15B": (78, 16, 4096, 1024, 50257), "GPT3_18B": (90, 16, 4096, 1024, 50257)}
PEERS = ["eager", "compile", "fsdp2", "ds_zero2", "ds_zero3"]
DEFAULT_LADDER = "GPT2_2B,GPT2_4B,GPT3_6B,GPT3_8B,GPT3_10B,GPT3_11B,GPT3_12B"
WARMUP_STEPS = 2  # steps left out of the median (allocation, compilation, JIT)


def fetch_deepspeed():
    """Here (PyPI reachable): DeepSpeed's sdist and the wheels above for cp312 x86_64."""
    os.makedirs(WHEELS, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "-q", "-d", WHEELS]
    subprocess.run(pip + ["--no-deps", "--no-binary", ":all:", DEEPSPEED], check=True)
    subprocess.run(pip + ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
                          "--platform", "manylinux_2_17_x86_64"] + DEEPSPEED_WHEELS, check=True)
    print(f"{WHEELS}: " + ", ".join(sorted(os.listdir(WHEELS))))


def ensure_deepspeed():
    """On the GPU machine: DeepSpeed from the carried files into .device/pylib, once."""
    if not os.path.isdir(os.path.join(PYLIB, "deepspeed")):
        files = sorted(os.listdir(WHEELS)) if os.path.isdir(WHEELS) else []
        wheels = [os.path.join(WHEELS, f) for f in files if f.endswith(".whl")]
        sdists = [os.path.join(WHEELS, f) for f in files if f.startswith("deepspeed-") and f.endswith(".tar.gz")]
        if not sdists:
            raise RuntimeError(f"no DeepSpeed sdist in {WHEELS}: run `python3 tools/bench_offload.py "
                               "--fetch-deepspeed` where PyPI is reachable and carry .device/wheels")
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", PYLIB]
        subprocess.run(pip + wheels, check=True)
        env = dict(os.environ, DS_BUILD_OPS="0", PYTHONPATH=PYLIB)
        subprocess.run(pip + ["--no-build-isolation"] + sdists, check=True, env=env)
    sys.path.append(PYLIB)  # after site-packages: the machine's own packages win


def prepare_deepspeed():
    """On the GPU machine: install DeepSpeed and JIT-build its CPU Adam, printing each phase's seconds.

    A fresh GPU machine spent over 4 minutes before DeepSpeed's first ZeRO-2 step (install, import,
    the CPU Adam build): a device call runs this first, so the ds_* runs after it (same machine, while
    it stays warm) time training only."""
    t0 = time.monotonic()
    # A JIT build killed mid-way (a device call's time limit) leaves its lock, and the next
    # load waits on it for ever; nothing else builds while this runs.
    ext_root = os.environ.get("TORCH_EXTENSIONS_DIR", os.path.expanduser("~/.cache/torch_extensions"))
    for lock in glob.glob(os.path.join(ext_root, "*", "*", "lock")):
        os.remove(lock)
        print(f"removed a stale build lock: {lock}")
    ensure_deepspeed()
    t1 = time.monotonic()
    from deepspeed.ops.op_builder import CPUAdamBuilder  # imports deepspeed
    t2 = time.monotonic()
    CPUAdamBuilder().load()
    t3 = time.monotonic()
    # The NVMe offload's op (--ds-nvme) needs libaio; a failure here is reported, not fatal.
    from deepspeed.ops.op_builder import AsyncIOBuilder
    try:
        AsyncIOBuilder().load()
        aio = "built"
    except Exception as e:  # noqa: BLE001 - reported: the NVMe runs will fail the same way
        aio = f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:200] if str(e).strip() else ''}"
    t4 = time.monotonic()
    print(json.dumps({"install_s": round(t1 - t0, 1), "import_s": round(t2 - t1, 1),
                      "cpu_adam_build_s": round(t3 - t2, 1), "async_io": aio, "async_io_s": round(t4 - t3, 1)}))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_rank_env():
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", LOCAL_RANK="0",
                      WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")


def deepspeed_config(args, bve, stage):
    """DeepSpeed ZeRO-`stage` with the optimizer (stage 3: and parameters) offloaded to pinned host
    memory; with --ds-nvme the optimizer state in files there instead."""
    optimizer = {"device": "cpu", "pin_memory": True}
    if args.ds_nvme:
        optimizer = {"device": "nvme", "nvme_path": args.ds_nvme, "pin_memory": True}
    zero = {"stage": stage, "offload_optimizer": optimizer, "overlap_comm": True, "contiguous_gradients": True}
    if stage == 3:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return {"train_micro_batch_size_per_gpu": args.batch_size, "gradient_accumulation_steps": 1,
            "bf16": {"enabled": args.dtype == "bf16"}, "gradient_clipping": bve.CLIP,
            "optimizer": {"type": "AdamW", "params": {"lr": bve.LR, "betas": list(bve.BETAS),
                                                      "eps": bve.EPS, "weight_decay": bve.WD}},
            "zero_optimization": zero, "steps_per_print": 1 << 30, "wall_clock_breakdown": False}


class Peer:
    """One peer's model, optimizer and step; `step(tokens)` returns the loss tensor."""

    def __init__(self, name, args, m):
        import torch
        sys.path.insert(0, HERE)
        import bench_vs_eager as bve  # the reference PyTorch model of ps_train's GPT
        self.torch, self.name, self.args = torch, name, args
        device = args.device
        torch.manual_seed(1234)
        llama = m.get("kind") == "llama"
        build = contextlib.nullcontext()
        if name.startswith("ds_"):
            ensure_deepspeed()
            import deepspeed
            one_rank_env()
            deepspeed.init_distributed(dist_backend="nccl")
            ds_config = deepspeed_config(args, bve, 2 if name == "ds_zero2" else 3)
            if name == "ds_zero3":
                # Partitioned and offloaded as each module is built, as DeepSpeed advises for models
                # beyond one device: the fp32 model never exists whole on the host (fair for --largest).
                build = deepspeed.zero.Init(config_dict_or_path=ds_config, remote_device="cpu", pin_memory=True)
        with build:
            model = bve.Llama(m) if llama else bve.Gpt(m)
        if llama and name == "ds_zero3":  # zero.Init made the rotary frequencies bf16: again, in fp32
            model.inv_freq = bve.rope_inv_freq(m).to(model.inv_freq.device)
        if name == "ds_zero3":
            # The model's initialisation wrote into empty partitions: again, one gathered parameter
            # at a time, so the loss is comparable with the other runners'.
            for pname, p in model.named_parameters():
                with deepspeed.zero.GatheredParameters([p], modifier_rank=0):
                    if llama:
                        bve.init_llama_parameter(pname, p)
                    else:
                        bve.init_parameter(pname, p, m["n_layer"])
            tied = model.embed_tokens.weight if llama and m["tied"] else None if llama else model.wte.weight
            if tied is not None:
                deepspeed.zero.register_external_parameter(model, tied)  # the LM head reads it
        blocks = "layers" if llama else "h"
        if args.checkpointing:
            setattr(model, blocks, torch.nn.ModuleList(checkpointed(b) for b in getattr(model, blocks)))
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": bve.WD}, {"params": no_decay, "weight_decay": 0.0}]
        self.autocast = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=args.dtype == "bf16")
        self.params = list(model.parameters())
        self.n_params = sum(getattr(p, "ds_numel", p.numel()) for p in self.params)  # partitioned: ds_numel
        if name in ("eager", "compile"):
            model = model.to(device)
            fused = {"fused": True} if device == "cuda" else {}
            self.opt = torch.optim.AdamW(groups, lr=bve.LR, betas=bve.BETAS, eps=bve.EPS, **fused)
            self.model = torch.compile(model) if name == "compile" else model
            self.step = self.step_torch
        elif name == "fsdp2":
            import torch.distributed as dist
            from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
            one_rank_env()
            dist.init_process_group("nccl" if device == "cuda" else "gloo")
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if args.dtype == "bf16" else torch.float32,
                                      reduce_dtype=torch.float32)
            for block in getattr(model, blocks):
                fully_shard(block, offload_policy=CPUOffloadPolicy(), mp_policy=mp)
            fully_shard(model, offload_policy=CPUOffloadPolicy(), mp_policy=mp)
            self.params = list(model.parameters())
            self.opt = torch.optim.AdamW([{"params": [p for p in self.params if p.dim() >= 2], "weight_decay": bve.WD},
                                          {"params": [p for p in self.params if p.dim() < 2], "weight_decay": 0.0}],
                                         lr=bve.LR, betas=bve.BETAS, eps=bve.EPS)
            self.autocast = torch.autocast(device_type=device, enabled=False)  # the policy casts
            self.model, self.step = model, self.step_torch
        else:  # ds_zero2 / ds_zero3 (DeepSpeed set up above)
            self.model, self.opt, _, _ = deepspeed.initialize(model=model, model_parameters=groups, config=ds_config)
            self.autocast = torch.autocast(device_type=device, enabled=False)  # DeepSpeed casts the model
            self.step = self.step_deepspeed

    def step_torch(self, tokens):
        self.opt.zero_grad(set_to_none=True)
        with self.autocast:
            loss = self.model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        self.torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        return loss

    def step_deepspeed(self, tokens):
        loss = self.model(tokens[:, :-1], tokens[:, 1:])
        self.model.backward(loss)
        self.model.step()  # clips (gradient_clipping) and zeroes the gradients
        return loss


def checkpointed(block):
    """`block` recomputed in backward (torch.utils.checkpoint), as ps_train's checkpointing."""
    import torch
    from torch.utils.checkpoint import checkpoint

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = block

        def forward(self, *inputs):
            return checkpoint(self.inner, *inputs, use_reentrant=False)

    return Wrapped()


def run_peer(name, args, m):
    import torch
    torch.set_num_threads(args.threads)
    if args.gpu_cap_gib and args.device == "cuda":  # the caching allocator refuses beyond the cap
        torch.cuda.set_per_process_memory_fraction(
            min(1.0, args.gpu_cap_gib * 2**30 / torch.cuda.get_device_properties(0).total_memory))
    peer = Peer(name, args, m)
    device = args.device
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    step_s, loss = [], float("nan")
    for _ in range(args.steps):
        tokens = torch.randint(0, m["vocab_size"], (args.batch_size, m["seq_len"] + 1), device=device)
        t0 = time.perf_counter()
        loss = peer.step(tokens).item()  # the host waits for the step
        step_s.append(time.perf_counter() - t0)
    return {"tokens_per_s": args.batch_size * m["seq_len"] / statistics.median(step_s[WARMUP_STEPS:] or step_s),
            "final_loss": loss, "params": peer.n_params,
            "peak_gpu_bytes": torch.cuda.max_memory_allocated() if device == "cuda" else 0,
            "peak_host_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def ps_command(args, m, out):
    """ps_train's command line for model `m`, its outputs under `out`."""
    sets = {"data.format": "synthetic", "data.train_path": "", "data.valid_path": "", "run.device": args.device, "run.threads": args.threads,
            "precision.dtype": args.dtype, "logging.level": "warn", "logging.log_every": 1, "run.output_dir": out,
            "train.max_steps": args.steps, "train.eval_steps": 1, "checkpoint.at_end": "false",
            "train.micro_batch_size": args.batch_size, "train.global_batch_size": args.batch_size,
            "data.seq_len": m["seq_len"], "model.n_layer": m["n_layer"], "model.n_head": m["n_head"],
            "model.n_embd": m["n_embd"], "model.n_positions": m["n_positions"], "model.vocab_size": m["vocab_size"],
            "chunk.enabled": "true", "model.activation_checkpointing": str(args.checkpointing).lower()}
    if m.get("kind") == "llama":  # the preset fills the other keys; those above agree with it
        sets.update({"model.type": "llama", "model.preset": m["preset"]})
    if args.gpu_cap_gib:
        sets["chunk.device_memory_bytes"] = int(args.gpu_cap_gib * 2**30)
    cmd = [args.ps_train, "--config", "configs/quickstart.yaml"]
    return cmd + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")] + [a for kv in args.ps_set for a in ("--set", kv)]


def run_ps(args, m):
    out = tempfile.mkdtemp(prefix="bench_offload_")
    proc = subprocess.run(ps_command(args, m, out), capture_output=True, text=True, cwd=ROOT, timeout=args.timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"ps_train exit {proc.returncode}: {(proc.stdout + proc.stderr).strip().splitlines()[-1:]}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    steps = [r for r in rows if "step_ms" in r and not r.get("summary")]
    summary = [r for r in rows if r.get("summary")][-1]
    timed = [r["step_ms"] for r in steps[WARMUP_STEPS:]] or [r["step_ms"] for r in steps]
    return {"tokens_per_s": args.batch_size * m["seq_len"] / (statistics.median(timed) / 1e3),
            "final_loss": summary.get("final_loss", steps[-1]["loss"]), "params": summary.get("params"),
            # the chunk runtime's measured peak (chunks + the rest), logged with each step's metrics
            "peak_gpu_bytes": max(r.get("peak_device_total_bytes", 0) for r in rows),
            "peak_host_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,  # ps_train's
            "startup_s": summary.get("startup_s")}


def child(args, m):
    """`--run NAME`: one runner in this process; its result as the last line."""
    try:
        result = run_ps(args, m) if args.run == "ps_train" else run_peer(args.run, args, m)
    except Exception as e:  # noqa: BLE001 - an OOM or a missing package is a row, not a crash
        result = {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"}
    print(json.dumps(result))


def shape_of(entry, args):
    """A ladder entry (a preset, or LAYERSxHEADSxWIDTH at --seq-len and --vocab-size) as a model dict."""
    if entry in PRESETS:
        n_layer, n_head, n_embd, seq_len, vocab = PRESETS[entry]
    else:
        try:
            n_layer, n_head, n_embd = (int(x) for x in entry.split("x"))
        except ValueError:
            raise SystemExit(f"--ladder: '{entry}' is neither a preset ({', '.join(PRESETS)}) nor LAYERSxHEADSxWIDTH")
        seq_len, vocab = args.seq_len, args.vocab_size
    return {"n_layer": n_layer, "n_head": n_head, "n_embd": n_embd, "n_positions": seq_len,
            "vocab_size": vocab, "seq_len": seq_len}


def approx_params(m):
    """GPT parameters (tied head, biases, learned positions): what ps_train reports."""
    e = m["n_embd"]
    return m["n_layer"] * (12 * e * e + 13 * e) + (m["vocab_size"] + m["n_positions"]) * e + 2 * e


def spawn(name, args, m):
    """Runner `name` on model `m` in a child process; its result row."""
    cmd = [sys.executable, os.path.abspath(__file__), "--run", name, "--model-json", json.dumps(m)] + sys.argv[1:]
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s + 60)
        lines = proc.stdout.strip().splitlines()
        result = json.loads(lines[-1]) if lines else {"error": f"exit {proc.returncode}: {proc.stderr[-300:]}"}
    except subprocess.TimeoutExpired:
        result = {"error": f"timed out after {args.timeout_s} s"}
    result.update(name=name, wall_s=round(time.time() - t0, 1))
    print(json.dumps(result), file=sys.stderr, flush=True)
    return result


def ps_plan(args, m):
    """ps_train --plan's verdict on model `m`: (fits, the reason when not)."""
    out = tempfile.mkdtemp(prefix="bench_offload_plan_")
    try:
        proc = subprocess.run(ps_command(args, m, out) + ["--plan"], capture_output=True, text=True, cwd=ROOT,
                              timeout=args.timeout_s)
    except subprocess.TimeoutExpired:
        return False, f"--plan timed out after {args.timeout_s} s"
    for line in proc.stdout.splitlines():
        if line.startswith("fits "):
            verdict = line[len("fits"):].strip()
            return verdict == "yes", ("" if verdict == "yes" else verdict)
    return False, f"--plan exit {proc.returncode}: {(proc.stdout + proc.stderr).strip().splitlines()[-1:]}"


def compare(args, m, peers):
    """The one-model table: ps_train and each peer, ps_train's ratio to each."""
    rows = [spawn(name, args, m) for name in ["ps_train"] + peers]
    ps = rows[0].get("tokens_per_s")
    tokens_per_step = args.batch_size * m["seq_len"]
    cap = f", GPU capped at {args.gpu_cap_gib} GiB" if args.gpu_cap_gib else ""
    print(f"{m.get('kind', 'gpt')} {m}, micro-batch {args.batch_size}, {args.steps} steps (median after "
          f"{WARMUP_STEPS}), {args.dtype} {args.device}{', checkpointing' if args.checkpointing else ''}{cap}; "
          f"ps_train --set {args.ps_set}")
    print(f"{'runner':<10} {'tokens/s':>10} {'ms/step':>9} {'peak GPU GiB':>13} {'peak host GiB':>14} "
          f"{'ps_train / it':>14} {'final loss':>11}")
    for r in rows:
        if "error" in r:
            print(f"{r['name']:<10} failed: {r['error']}")
            continue
        ratio = f"{ps / r['tokens_per_s']:.2f}x" if ps else "-"
        print(f"{r['name']:<10} {r['tokens_per_s']:>10.0f} {1e3 * tokens_per_step / r['tokens_per_s']:>9.1f} "
              f"{r['peak_gpu_bytes'] / 2**30:>13.2f} {r.get('peak_host_bytes', 0) / 2**30:>14.2f} {ratio:>14} "
              f"{r['final_loss']:>11.4f}")
    counts = {r.get("params") for r in rows if r.get("params")}
    if len(counts) > 1:
        print(f"warning: parameter counts differ ({sorted(counts)}): not the same model")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"model": m, "args": vars(args), "rows": rows}, f, indent=1)


def largest(args, runners):
    """Per runner, the largest model of the ladder that trains; ps_train's ratio to each in parameters."""
    ladder = [e for e in args.ladder.split(",") if e]
    shapes = {e: shape_of(e, args) for e in ladder}
    trials = []  # every trial, in order: runner, model, params, and the result (or the plan's refusal)

    def record(runner, entry, result):
        row = dict(result, name=runner, model=entry, shape=shapes[entry],
                   params=result.get("params") or approx_params(shapes[entry]))
        trials.append(row)
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"mode": "largest", "ladder": ladder, "args": vars(args), "trials": trials}, f, indent=1)
        return row

    best = {}
    for runner in runners:
        best[runner] = None
        if runner == "ps_train":  # the plan first, then the largest it admits, stepping down on a failure
            admitted = []
            for entry in ladder:
                fits, why = ps_plan(args, shapes[entry])
                if fits:
                    admitted.append(entry)
                else:
                    record(runner, entry, {"error": f"plan refuses: {why}", "plan": "refused"})
            order = list(reversed(admitted))
        else:  # from the bottom up, to the first failure
            order = ladder
        for entry in order:
            row = record(runner, entry, spawn(runner, args, shapes[entry]))
            ok = "error" not in row
            if ok and runner == "ps_train":
                best[runner] = row
                break
            if runner != "ps_train":
                if not ok:
                    break
                best[runner] = row
    print(f"largest model that trains {args.steps} steps: micro-batch {args.batch_size}, {args.dtype} {args.device}"
          f"{', checkpointing' if args.checkpointing else ''}; ladder {','.join(ladder)}; ps_train --set {args.ps_set}")
    print(f"{'runner':<10} {'largest':<12} {'parameters':>11} {'tokens/s':>9} {'ps_train / it':>14}  first failure above it")
    ps = best.get("ps_train")
    for runner in runners:
        row = best[runner]
        above = [t for t in trials if t["name"] == runner and "error" in t and
                 (row is None or t["params"] > row["params"])]
        first = min(above, key=lambda t: t["params"]) if above else None  # the smallest failing model above it
        failure = f"{first['model']}: {first['error'][:120]}" if first else "none (the ladder's top trained)"
        if row is None:
            print(f"{runner:<10} {'none':<12} {'-':>11} {'-':>9} {'-':>14}  {failure}")
            continue
        ratio = f"{ps['params'] / row['params']:.2f}x" if ps else "-"
        count = f"{row['params'] / 1e9:.2f}B" if row["params"] >= 1e9 else f"{row['params'] / 1e6:.2f}M"
        print(f"{runner:<10} {row['model']:<12} {count:>11} {row['tokens_per_s']:>9.0f} {ratio:>14}  "
              f"{failure}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fetch-deepspeed", action="store_true", help="download DeepSpeed into .device/wheels and stop")
    ap.add_argument("--prepare-deepspeed", action="store_true",
                    help="GPU machine: install DeepSpeed from .device/wheels, build its CPU Adam, print seconds")
    ap.add_argument("--ps-train", default=os.path.join(ROOT, "bazel-bin/trainer/ps_train"))
    ap.add_argument("--peers", default="eager,compile,fsdp2,ds_zero2,ds_zero3",
                    help=f"comma-separated, of {','.join(PEERS)}")
    ap.add_argument("--ps-set", action="append", default=[], help="extra ps_train --set k=v (repeatable)")
    ap.add_argument("--preset", help=f"model shape (overrides --n-*): {', '.join(PRESETS)}, or a Llama preset of "
                    "tools/bench_vs_eager.py (llama-3.2-1b, llama-3.1-8b, ...)")
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-head", type=int, default=2)
    ap.add_argument("--n-embd", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--vocab-size", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=8, help="micro = global batch (sequences)")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--checkpointing", action="store_true", help="activation checkpointing per block, everywhere")
    ap.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "bf16"])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--timeout-s", type=int, default=1800, help="per runner (per trial with --largest)")
    ap.add_argument("--gpu-cap-gib", type=float, help="every runner's GPU memory capped at this many GiB")
    ap.add_argument("--ds-nvme", help="the DeepSpeed peers' optimizer state in files under this folder")
    ap.add_argument("--out", help="also write the rows as JSON here")
    ap.add_argument("--largest", action="store_true", help="the largest model of --ladder each of --runners trains")
    ap.add_argument("--ladder", default=DEFAULT_LADDER,
                    help="--largest: model shapes, smallest first: presets or LAYERSxHEADSxWIDTH (at --seq-len, --vocab-size)")
    ap.add_argument("--runners", default="ps_train,ds_zero3", help="--largest: comma-separated, ps_train and peers")
    ap.add_argument("--run", help=argparse.SUPPRESS)  # internal: one runner in a child process
    ap.add_argument("--model-json", help=argparse.SUPPRESS)  # internal: the child's model
    args = ap.parse_args()
    if args.fetch_deepspeed:
        return fetch_deepspeed()
    if args.prepare_deepspeed:
        return prepare_deepspeed()
    if args.preset in PRESETS:
        args.n_layer, args.n_head, args.n_embd, args.seq_len, args.vocab_size = PRESETS[args.preset]
    m = {"kind": "gpt", "n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd,
         "n_positions": args.seq_len, "vocab_size": args.vocab_size, "seq_len": args.seq_len}
    if args.preset and args.preset not in PRESETS:
        sys.path.insert(0, HERE)
        import bench_vs_eager as bve  # its Llama presets (imports torch)
        if args.preset not in bve.LLAMA_PRESETS:
            ap.error(f"--preset {args.preset}: not one of {', '.join(list(PRESETS) + list(bve.LLAMA_PRESETS))}")
        m = bve.llama_shape(args.preset, args.seq_len)
    if args.model_json:
        m = json.loads(args.model_json)
    args.ps_train = os.path.abspath(args.ps_train)
    if args.run:
        return child(args, m)
    names = [p for p in (args.runners if args.largest else args.peers).split(",") if p]
    unknown = set(names) - set(PEERS) - ({"ps_train"} if args.largest else set())
    if unknown:
        ap.error(f"unknown runner(s) {sorted(unknown)}; known: {['ps_train'] + PEERS}")
    if args.largest:
        return largest(args, names)
    return compare(args, m, names)


if __name__ == "__main__":
    main()
