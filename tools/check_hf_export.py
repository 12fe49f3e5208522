#!/usr/bin/env python3
"""Checks that an HF folder written by ps_train loads in `transformers` and computes what
ps_train computes: developer-run (needs torch, transformers, tokenizers; not part of CI or
of ps_train at run time).

  source tools/python_peer_env.sh
  python3 tools/check_hf_export.py --folder runs/x/hf [--ps-sample bazel-bin/tools/ps_sample]

It loads the folder with GPT2LMHeadModel.from_pretrained and AutoTokenizer, tokenizes a
prompt with both tokenizers (HF's and ps_train's, through `ps_sample --dump-logits`),
and compares the ids (equal) and the fp32 logits (max abs difference below --atol).
Exit status 0 when both hold.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, GPT2LMHeadModel

PROMPT = "The careful teacher opens a window. Über 東京 🙂 tabs\tand  spaces."


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--folder", required=True)
    ap.add_argument("--ps-sample", default="bazel-bin/tools/ps_sample")
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--atol", type=float, default=1e-4)
    args = ap.parse_args()

    model = GPT2LMHeadModel.from_pretrained(args.folder, torch_dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(args.folder)
    hf_ids = tok.encode(args.prompt)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "logits.safetensors")
        subprocess.run([args.ps_sample, "--hf", args.folder, "--prompt", args.prompt, "--device", "cpu",
                        "--dump-logits", out], check=True)
        ps = load_file(out)
    ps_ids = ps["ids"][0].tolist()
    with torch.no_grad():
        hf_logits = model(input_ids=torch.tensor([hf_ids])).logits.float()
    ids_equal = ps_ids == hf_ids
    diff = (hf_logits - ps["logits"]).abs().max().item() if ids_equal else float("inf")
    print(f"folder {args.folder}: {len(hf_ids)} tokens, ids equal: {ids_equal}, "
          f"max |logits difference| {diff:.3g} (atol {args.atol})")
    if not ids_equal:
        print(f"  HF ids       {hf_ids}\n  ps_train ids {ps_ids}")
    return 0 if ids_equal and diff <= args.atol else 1


if __name__ == "__main__":
    sys.exit(main())
