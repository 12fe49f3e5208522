#!/usr/bin/env python3
"""Compares ps_train's ids with HF `tokenizers`' for any tokenizer folder (developer-run).

For a released tokenizer (Llama 3, Qwen, Mistral, ...) downloaded by the developer: each
line of --text is encoded by `ps_prep --print-ids` (add_special_tokens=False) and by HF's
`Tokenizer.from_file(...).encode(line, add_special_tokens=False)`; the first lines that
differ are printed, and the exit status is 1 when any does.

usage: tools/check_tokenizer_ids.py --tokenizer DIR --text FILE [--prep bazel-bin/tools/ps_prep]
         (build it first: bazel build //tools:ps_prep)
"""
import argparse
import os
import subprocess
import sys

from tokenizers import Tokenizer


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True, help="a folder holding tokenizer.json")
    ap.add_argument("--text", required=True, help="UTF-8 text; each line is one case")
    ap.add_argument("--prep", default="bazel-bin/tools/ps_prep")
    ap.add_argument("--show", type=int, default=5, help="differing lines to print")
    args = ap.parse_args()

    with open(args.text, encoding="utf-8", newline="\n") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    path = args.tokenizer
    hf = Tokenizer.from_file(os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path)
    out = subprocess.run([args.prep, "--tokenizer", path, "--print-ids"], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, encoding="utf-8")
    if out.returncode != 0:
        sys.exit(f"ps_prep failed ({out.returncode}): {out.stderr.strip()}")
    ours = [[int(x) for x in row.split()] for row in out.stdout.split("\n")[:len(lines)]]
    bad = [i for i, line in enumerate(lines) if hf.encode(line, add_special_tokens=False).ids != ours[i]]
    for i in bad[:args.show]:
        print(f"line {i + 1}: {lines[i]!r}\n  HF:       {hf.encode(lines[i], add_special_tokens=False).ids}\n"
              f"  ps_train: {ours[i]}")
    print(f"{len(lines) - len(bad)} of {len(lines)} lines give HF's ids")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
