#!/usr/bin/env python3
"""Checks that an HF folder written by ps_train loads in `transformers` and computes what
ps_train computes: developer-run (needs torch, transformers, tokenizers; not part of CI or
of ps_train at run time).

  source tools/python_peer_env.sh
  python3 tools/check_hf_export.py --folder runs/x/hf [--ps-sample bazel-bin/tools/ps_sample]

It loads the folder with AutoModelForCausalLM.from_pretrained (GPT2LMHeadModel,
LlamaForCausalLM, Qwen2/Qwen3/MistralForCausalLM, in fp32) and AutoTokenizer, tokenizes a
prompt with both tokenizers (HF's and ps_train's, through `ps_sample --dump-logits`),
and compares the ids (equal; a Llama-class folder's add_bos_token / add_eos_token applied
as transformers 4 does, see hf_encode) and the fp32 logits (max abs difference below
--atol).
With --checkpoint (a step_N folder the export came from), every tensor transformers
loaded must also equal the checkpoint's fp32 master rounded to the folder's dtype
(config.json torch_dtype), bitwise. Exit status 0 when all hold.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPT = "The careful teacher opens a window. Über 東京 🙂 tabs\tand  spaces."


def hf_encode(tok, folder, text):
    """HF's ids with special tokens as transformers 4 gives them: for its Llama tokenizer
    classes, tokenizer_config.json's add_bos_token / add_eos_token replace the
    post-processor's (ps_train's rule, tokenizer/tokenizer.cc); transformers 5 ignores
    them once tokenizer.json exists, so they are applied here by hand."""
    path = os.path.join(folder, "tokenizer_config.json")
    config = json.load(open(path)) if os.path.exists(path) else {}
    flags = [k for k in ("add_bos_token", "add_eos_token") if config.get(k) is not None]
    if config.get("tokenizer_class") not in ("LlamaTokenizer", "LlamaTokenizerFast") or not flags:
        return tok.encode(text)
    plain = tok.encode(text, add_special_tokens=False)
    with_specials = tok.encode(text)
    bos = [tok.bos_token_id] if config.get("add_bos_token") else (
        with_specials[:1] if "add_bos_token" not in flags and with_specials[:1] == [tok.bos_token_id] else [])
    eos = [tok.eos_token_id] if config.get("add_eos_token") else (
        with_specials[-1:] if "add_eos_token" not in flags and with_specials[-1:] == [tok.eos_token_id] else [])
    print(f"tokenizer_class {config['tokenizer_class']}: {', '.join(f'{k} {config[k]}' for k in flags)} applied")
    return bos + plain + eos


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--folder", required=True)
    ap.add_argument("--ps-sample", default="bazel-bin/tools/ps_sample")
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--checkpoint", help="a step_N checkpoint folder: the loaded tensors equal its masters")
    args = ap.parse_args()

    model = AutoModelForCausalLM.from_pretrained(args.folder, dtype=torch.float32).eval()
    tensors_equal = args.checkpoint is None or same_tensors(model, args.folder, args.checkpoint)
    tok = AutoTokenizer.from_pretrained(args.folder)
    hf_ids = hf_encode(tok, args.folder, args.prompt)
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
    return 0 if ids_equal and diff <= args.atol and tensors_equal else 1


def same_tensors(model, folder, checkpoint):
    """Every parameter of `model` equals the checkpoint's master in the folder's dtype."""
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
        json.load(open(os.path.join(folder, "config.json"))).get("torch_dtype", "float32")]
    masters = load_file(os.path.join(checkpoint, "model.safetensors"))
    loaded = model.state_dict()
    prefix = "transformer." if "transformer.wte.weight" in loaded else "model."
    bad = []
    for name, master in masters.items():
        key = name if name == "lm_head.weight" else prefix + name
        if key not in loaded:
            bad.append(f"{key}: not in the loaded model")
            continue
        value = loaded[key].float()
        if key.endswith(("attn.weight", "c_fc.weight", "c_proj.weight")) and value.shape != master.shape:
            value = value.t()  # GPT-2's Conv1D layout
        if not torch.equal(value, master.float().to(dtype).float()):
            bad.append(f"{key}: differs")
    print(f"{len(masters)} tensors against {checkpoint} in {dtype}: {'all equal' if not bad else bad[:5]}")
    return not bad


if __name__ == "__main__":
    sys.exit(main())
