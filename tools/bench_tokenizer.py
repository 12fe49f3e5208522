#!/usr/bin/env python3
"""Tokenizer throughput: ps_train's C++ tokenizer (//tools:bench_tokenizer) against HF
`tokenizers` on the same text and the same tokenizer file.

HF single-threaded: `Tokenizer.encode(text)` on the whole text, and `encode(doc)` for each
document in a loop; multi-threaded: `encode_batch(documents)` with
RAYON_NUM_THREADS=--threads (documents split at blank lines, as the C++ benchmark does). Best of --iters runs each. Token counts of the two are
compared, and a ratio table printed (C++ / HF: > 1 means ps_train is faster).

usage: tools/bench_tokenizer.py --tokenizer DIR_OR_JSON --text FILE [--threads N]
         [--bench bazel-bin/tools/bench_tokenizer]   (build it first: bazel build //tools:bench_tokenizer)
"""
import argparse
import json
import os
import subprocess
import sys
import time


def best_seconds(iters, fn):
    fn()  # warm-up
    best = float("inf")
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json or a folder holding one")
    ap.add_argument("--text", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--bench", default="bazel-bin/tools/bench_tokenizer")
    args = ap.parse_args()

    # Rayon reads its thread count once, when its pool starts.
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    from tokenizers import Tokenizer, __version__

    path = args.tokenizer
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    tok = Tokenizer.from_file(path)
    with open(args.text, encoding="utf-8") as f:
        text = f.read()
    nbytes = len(text.encode())
    docs = []
    start = 0
    while start < len(text):
        end = text.find("\n\n", start)
        end = len(text) if end < 0 else end + 2
        docs.append(text[start:end])
        start = end

    hf = {}
    hf["single_s"] = best_seconds(args.iters, lambda: hf.__setitem__(
        "single_tokens", len(tok.encode(text, add_special_tokens=False).ids)))
    hf["docs_s"] = best_seconds(args.iters, lambda: hf.__setitem__(
        "docs_tokens", sum(len(tok.encode(d, add_special_tokens=False).ids) for d in docs)))
    hf["multi_s"] = best_seconds(args.iters, lambda: hf.__setitem__(
        "multi_tokens", sum(len(e.ids) for e in tok.encode_batch(docs, add_special_tokens=False))))

    out = subprocess.run([args.bench, "--tokenizer", args.tokenizer, "--text", args.text,
                          "--threads", str(args.threads), "--iters", str(args.iters)],
                         check=True, capture_output=True, text=True).stdout
    cpp = json.loads(out.strip().splitlines()[-1])

    print(f"text {args.text}: {nbytes / 1e6:.2f} MB, {len(docs)} documents; tokenizer {args.tokenizer}; "
          f"HF tokenizers {__version__}; {args.threads} threads")
    keys = ["single_tokens", "docs_tokens", "multi_tokens"]
    if [cpp[k] for k in keys] != [hf[k] for k in keys]:
        print(f"WARNING: token counts differ: C++ {[cpp[k] for k in keys]}, HF {[hf[k] for k in keys]}")
    print(f"| run | ps_train MB/s | ps_train Mtok/s | HF MB/s | HF Mtok/s | ps_train / HF |")
    print(f"|---|---:|---:|---:|---:|---:|")
    for name, key, ntok in [("1 thread, whole text (`encode`)", "single", "single_tokens"),
                            ("1 thread, documents (`encode` each)", "docs", "docs_tokens"),
                            (f"{args.threads} threads, documents (`encode_batch`)", "multi", "multi_tokens")]:
        c, h = cpp[key + "_s"], hf[key + "_s"]
        print(f"| {name} | {nbytes / 1e6 / c:.1f} | {cpp[ntok] / c / 1e6:.2f} | {nbytes / 1e6 / h:.1f} | "
              f"{hf[ntok] / h / 1e6:.2f} | {h / c:.2f}x |")


if __name__ == "__main__":
    sys.exit(main())
