#!/usr/bin/env python3
"""Checks a LoRA run's exports against PEFT: developer-run (needs torch, transformers and
peft; not part of CI or of ps_train at run time).

  source tools/python_peer_env.sh && pip install --no-deps peft accelerate
  python3 tools/check_peft_export.py --base <HF base folder> --adapter <ps_export folder> \\
      [--merged <ps_export --merge folder>] [--task causal|seq_cls|mlm]

Loads the base with AutoModelForCausalLM.from_pretrained (fp32; --task seq_cls:
AutoModelForSequenceClassification, a BERT classifier whose head the adapter folder
holds whole; mlm: AutoModelForMaskedLM), the adapter over it with
PeftModel.from_pretrained, and compares on random tokens:
  - the adapter's logits against the base's (they must differ: the adapter was trained);
  - with --merged, the merged folder's logits (transformers) against PEFT's, and every
    weight of PEFT's merge_and_unload() against the merged folder's (rounded to its dtype).
Exit status 0 when all hold.
"""
import argparse
import sys

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSequenceClassification

AUTO = {"causal": AutoModelForCausalLM, "seq_cls": AutoModelForSequenceClassification, "mlm": AutoModelForMaskedLM}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--merged")
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--task", choices=sorted(AUTO), default="causal")
    args = ap.parse_args()
    auto = AUTO[args.task]

    base = auto.from_pretrained(args.base, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1, base.config.vocab_size, (2, 16), generator=gen)
    with torch.no_grad():
        base_logits = base(ids).logits.clone()
        peft = PeftModel.from_pretrained(base, args.adapter).eval()
        peft_logits = peft(ids).logits
    moved = (peft_logits - base_logits).abs().max().item()
    print(f"adapter vs base: max |logit diff| {moved:.3e}")
    ok = moved > 0
    if args.merged:
        merged = auto.from_pretrained(args.merged, dtype=torch.float32).eval()
        with torch.no_grad():
            diff = (merged(ids).logits - peft_logits).abs().max().item()
        print(f"merged export vs PEFT: max |logit diff| {diff:.3e} (atol {args.atol})")
        ok &= diff <= args.atol
        unloaded = peft.merge_and_unload().state_dict()
        theirs = merged.state_dict()
        worst = max((unloaded[k] - theirs[k]).abs().max().item() for k in theirs if k in unloaded)
        print(f"merge_and_unload vs merged export: max |weight diff| {worst:.3e}")
        ok &= worst <= args.atol
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
