#!/usr/bin/env python3
"""Benchmark (not a test): ps_sample's greedy decoding with its KV cache against
`transformers`' greedy `generate` (use_cache=True, do_sample=False), on the CPU in fp32.

Builds a random LlamaForCausalLM of about 100M parameters (12 layers, hidden 768, 12
heads with 4 kv heads, SwiGLU 2048, vocabulary 32000, tied embeddings) with a synthetic
byte-level BPE tokenizer.json of exactly 32000 ids (every id decodes), saved with
save_pretrained in a temporary folder, no eos id (both sides make every token). Both
sides get the same prompt ids, the same number of new tokens and threads
(torch.set_num_threads / ps_sample --threads); they run alternately and the best of
each is kept (and the median ratio of the back-to-back pairs, steadier when the machine
is shared). `transformers` is warmed up first; ps_sample's prefill includes its first
call. Timed: generate() on one side, ps_sample's own prefill + decode on the other (the
summary on its stderr; loading is not timed on either side). Decode-only figures too:
HF's decode time is generate(N) minus generate(1).

  source tools/python_peer_env.sh
  bazel build //tools:ps_sample          # .bazelrc: -O2; LibTorch does the arithmetic
  python3 tools/bench_sample.py [--threads 2] [--new-tokens 128] [--repeats 3] [--ps-sample PATH]
  python3 tools/bench_sample.py --gemv-only [--threads 1]   # the weight layouts' GB/s only
  python3 tools/bench_sample.py --hidden 96 --intermediate 192   # tiny weights: the rest of a step

Fails (exit 1) when the token ids differ. The last line printed is a JSON object
(hf_tokens_per_s, ps_tokens_per_s, ratio, decode ratio, ...).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB = 32000
PROMPT = "The old bridge over the river was built of stone, and every spring the water rose to its arches. "
SUMMARY = re.compile(r"prefill (\d+) tokens in ([0-9.]+) s .*decode (\d+) tokens in ([0-9.]+) s")


def write_tokenizer(folder):
    """Byte-level BPE: the 256 byte symbols, then merges of symbol pairs up to VOCAB ids."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)}
    merges = []
    for a in alphabet:
        for b in alphabet:
            if len(vocab) == VOCAB:
                break
            vocab[a + b] = len(vocab)
            merges.append((a, b))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(os.path.join(folder, "tokenizer.json"))
    return PreTrainedTokenizerFast(tokenizer_file=os.path.join(folder, "tokenizer.json"))


def make_model(folder, seed, hidden=768, intermediate=2048):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=12,
                         num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=2048,
                         tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None,
                         initializer_range=0.05)  # logits far from uniform: no near-ties in greedy choices
    model = LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = None
    model.save_pretrained(folder)
    return model


def run_hf(model, ids, new_tokens):
    with torch.inference_mode():
        start = time.perf_counter()
        out = model.generate(ids, max_new_tokens=new_tokens, do_sample=False, use_cache=True, eos_token_id=None,
                             pad_token_id=0)
        seconds = time.perf_counter() - start
    return out[0, ids.shape[1]:].tolist(), seconds


def run_ps(binary, folder, prompt, new_tokens, threads, extra):
    cmd = [binary, "--hf", folder, "--prompt", prompt, "--max-new-tokens", str(new_tokens), "--temperature", "0",
           "--threads", str(threads), "--device", "cpu", "--ignore-eos", "--print-ids"] + extra
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"ps_sample failed ({res.returncode}): {res.stderr}")
    lines = res.stdout.strip().split("\n")
    m = SUMMARY.search(res.stderr)
    if not m or len(lines) != 2:
        sys.exit(f"ps_sample printed no summary or ids: {res.stdout}\n{res.stderr}")
    prompt_ids = [int(x) for x in lines[0].split()]
    new_ids = [int(x) for x in lines[1].split()]
    return prompt_ids, new_ids, float(m.group(2)), float(m.group(4)), res.stderr.strip().split("\n")[-1]


def gemv_layouts(threads):
    """GB/s of one token's products with the weights of the model (12 layers' q, k, v, o,
    gate, up, down and the 32000-row head, 400 MB of fp32) in HF's [out, in] layout, in
    [in, out], and packed as llama_decode.cc packs them, against a plain sum over as many
    bytes: what a decode step can reach (PackWeights' reason). Best of 7 rounds."""
    shapes = [(768, 768), (256, 768), (256, 768), (768, 768), (2048, 768), (2048, 768), (768, 2048)] * 12
    shapes.append((VOCAB, 768))
    out_in = [torch.randn(o, i) for o, i in shapes]
    in_out = [w.t().contiguous() for w in out_in]
    packed = []  # per layer: q|k|v, o, gate|up, down; then the head (llama_decode.cc)
    for layer in range(12):
        q, k, v, o, gate, up, down = in_out[7 * layer:7 * layer + 7]
        packed += [torch.cat([q, k, v], 1), o, torch.cat([gate, up], 1), down]
    packed.append(in_out[-1])
    xs = {768: torch.randn(1, 768), 2048: torch.randn(1, 2048)}
    flat = torch.randn(sum(o * i for o, i in shapes))
    gb = flat.numel() * 4 / 1e9

    variants = {
        "F.linear(x, W), W [out, in] (HF's layout)": lambda: [F.linear(xs[w.shape[1]], w) for w in out_in],
        "x @ W, W [in, out]": lambda: [xs[w.shape[0]] @ w for w in in_out],
        "x @ W, W [in, out], q|k|v and gate|up packed (PackWeights)": lambda: [xs[w.shape[0]] @ w for w in packed],
        "sum of as many bytes": lambda: flat.sum(),
    }
    rows = {name: float("inf") for name in variants}
    with torch.inference_mode():
        for _ in range(7):  # rounds of every variant in turn: the machine's load changes alike for all
            for name, f in variants.items():
                start = time.perf_counter()
                f()
                rows[name] = min(rows[name], time.perf_counter() - start)
    for name, seconds in rows.items():
        print(f"  {name}: {seconds * 1e3:.1f} ms, {gb / seconds:.1f} GB/s")
    keys = ["out_in_gb_per_s", "in_out_gb_per_s", "packed_gb_per_s", "sum_gb_per_s"]
    print(json.dumps({"threads": threads, "weight_gb": round(gb, 3),
                      **{key: round(gb / seconds, 2) for key, seconds in zip(keys, rows.values())}}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prompt-repeats", type=int, default=3, help="the prompt sentence this many times")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ps-sample", default="bazel-bin/tools/ps_sample")
    ap.add_argument("--no-cache-too", action="store_true", help="also time ps_sample --no-cache (slow)")
    ap.add_argument("--gemv-only", action="store_true", help="only the weight layouts' GB/s (no model, no ps_sample)")
    ap.add_argument("--hidden", type=int, default=768, help="hidden size (12 heads); 96 with --intermediate 192: "
                    "the per-token cost of everything but the weights")
    ap.add_argument("--intermediate", type=int, default=2048)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.gemv_only:
        return gemv_layouts(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        hf_tok = write_tokenizer(folder)
        model = make_model(folder, args.seed, args.hidden, args.intermediate)
        params = sum(p.numel() for p in model.parameters())
        prompt = PROMPT * args.prompt_repeats
        ids = torch.tensor([hf_tok(prompt)["input_ids"]])
        print(f"model: {params / 1e6:.1f}M parameters; prompt {ids.shape[1]} tokens, {args.new_tokens} new; "
              f"{args.threads} threads, torch {torch.__version__}", flush=True)
        run_hf(model, ids, 4)  # warm-up
        hf_best = hf_first = float("inf")
        ps_best = ps_prefill_best = ps_decode_best = float("inf")
        hf_ids = ps_ids = None
        pair_ratios = []  # HF / ps of each repeat: the two ran back to back, under the same load
        for r in range(args.repeats):
            hf_ids, seconds = run_hf(model, ids, args.new_tokens)
            hf_best = min(hf_best, seconds)
            hf_first = min(hf_first, run_hf(model, ids, 1)[1])
            prompt_ids, ps_ids, prefill_s, decode_s, line = run_ps(args.ps_sample, folder, prompt, args.new_tokens,
                                                                   args.threads, [])
            if prompt_ids != ids[0].tolist():
                sys.exit(f"prompt ids differ: ps {prompt_ids} vs HF {ids[0].tolist()}")
            ps_best = min(ps_best, prefill_s + decode_s)
            pair_ratios.append(seconds / (prefill_s + decode_s))
            ps_prefill_best, ps_decode_best = min(ps_prefill_best, prefill_s), min(ps_decode_best, decode_s)
            print(f"  run {r}: HF {seconds:.3f} s, ps_sample {prefill_s + decode_s:.3f} s ({line})", flush=True)
        if hf_ids != ps_ids:
            first = next(i for i, (a, b) in enumerate(zip(hf_ids, ps_ids)) if a != b)
            sys.exit(f"FAIL: the tokens differ from new token {first}: HF {hf_ids[first:first + 8]} "
                     f"ps {ps_ids[first:first + 8]}")
        n = args.new_tokens
        result = {"threads": args.threads, "params": params, "prompt_tokens": ids.shape[1], "new_tokens": n,
                  "identical_tokens": True, "hf_tokens_per_s": n / hf_best, "ps_tokens_per_s": n / ps_best,
                  "ratio": hf_best / ps_best,
                  "hf_decode_tokens_per_s": (n - 1) / max(hf_best - hf_first, 1e-9),
                  "ps_decode_tokens_per_s": (n - 1) / ps_decode_best,
                  "decode_ratio": (hf_best - hf_first) / ps_decode_best,
                  "hf_prefill_s": hf_first, "ps_prefill_s": ps_prefill_best,
                  "median_pair_ratio": sorted(pair_ratios)[len(pair_ratios) // 2],
                  "load_average": os.getloadavg()[0]}
        if args.no_cache_too:
            _, nc_ids, prefill_s, decode_s, _ = run_ps(args.ps_sample, folder, prompt, n, args.threads, ["--no-cache"])
            result["ps_no_cache_tokens_per_s"] = n / (prefill_s + decode_s)
            result["no_cache_identical_tokens"] = nc_ids == ps_ids
        print(f"tokens identical; HF {result['hf_tokens_per_s']:.2f} tokens/s, ps_sample "
              f"{result['ps_tokens_per_s']:.2f} tokens/s: {result['ratio']:.2f}x (decode only "
              f"{result['decode_ratio']:.2f}x; median of the back-to-back pairs {result['median_pair_ratio']:.2f}x)")
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()}))


if __name__ == "__main__":
    main()
