#!/usr/bin/env python3
"""Writes tests/tools/testdata/llama_path/{llama,qwen2,qwen3,mistral}/: tiny HF folders with
a tokenizer, for the user path ps_prep -> ps_train (chunked fine-tune, export) ->
ps_export -> ps_sample of each Llama-family architecture (tests/tools/llama_path_test.sh).

Each is the architecture of tools/gen_llama_fixture.py (same shapes, rope, biases, norms,
window, dtype) with HF's own random init, a vocabulary as large as the family tokenizer
fixture it is paired with (tests/tokenizer/testdata/, trained by
tools/gen_family_tokenizers.py), and what save_pretrained writes plus the tokenizer's
files and a generation_config.json naming its end-of-text ids, as a released model has:

  llama    Llama 3 tokenizer (llama3: <|begin_of_text|> added, eos end_of_text and eot_id)
  qwen2    Qwen2 tokenizer (qwen2: no BOS, eos <|endoftext|> and <|im_end|>)
  qwen3    Qwen2 tokenizer, as Qwen3 ships it
  mistral  SentencePiece-style Metaspace tokenizer (spm_metaspace: <s> ... </s>)
  llama_chat  Llama 3 tokenizer with its chat template and header tokens
           (tests/tools/testdata/sft/llama3): the stand-in for Llama-3.1-8B-Instruct in
           the README's LoRA walk-through (tests/tools/lora_chat_path_test.sh)

Developer-run when the fixtures must change; needs torch and transformers, no downloads:

  source tools/python_peer_env.sh && python3 tools/gen_llama_path_fixture.py
"""
import json
import os
import shutil
import sys

import torch
from transformers import GenerationConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_llama_fixture as fx  # noqa: E402  (the architectures' shapes)

ROOT = fx.ROOT
TOKENIZERS = os.path.join(ROOT, "tests", "tokenizer", "testdata")
OUT = os.path.join(ROOT, "tests", "tools", "testdata", "llama_path")

# family -> (tokenizer fixture, bos token or None, eos tokens)
PAIRS = {
    "llama": ("llama3", "<|begin_of_text|>", ["<|end_of_text|>", "<|eot_id|>"]),
    "qwen2": ("qwen2", None, ["<|endoftext|>", "<|im_end|>"]),
    "qwen3": ("qwen2", None, ["<|endoftext|>", "<|im_end|>"]),
    "mistral": ("spm_metaspace", "<s>", ["</s>"]),
    "llama_chat": (os.path.join(ROOT, "tests", "tools", "testdata", "sft", "llama3"), "<|begin_of_text|>",
                   ["<|end_of_text|>", "<|eot_id|>"]),
}


def vocab_of(tokenizer_json):
    j = json.load(open(tokenizer_json))
    ids = dict(j["model"]["vocab"])
    for a in j.get("added_tokens", []):
        ids[a["content"]] = a["id"]
    return ids


def make(name):
    config_cls, model_cls, dtype, _, extra = fx.FAMILIES[name.split("_")[0]]
    tok_name, bos, eos = PAIRS[name]
    src = os.path.join(TOKENIZERS, tok_name)  # tok_name when it is absolute
    ids = vocab_of(os.path.join(src, "tokenizer.json"))
    common = dict(fx.COMMON, vocab_size=max(ids.values()) + 1, bos_token_id=ids[bos] if bos else None,
                  eos_token_id=ids[eos[0]], max_position_embeddings=128)
    out = os.path.join(OUT, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    torch.manual_seed(sum(map(ord, name)) + 1)
    model = model_cls(config_cls(**common, **extra)).to(dtype)
    model.save_pretrained(out, safe_serialization=True)
    generation = GenerationConfig(bos_token_id=common["bos_token_id"],
                                  eos_token_id=[ids[e] for e in eos] if len(eos) > 1 else ids[eos[0]])
    generation.save_pretrained(out)
    for f in os.listdir(src):
        if f == "generation_config.json":
            continue  # ours, written above
        shutil.copy(os.path.join(src, f), os.path.join(out, f))
    # Special tokens as plain strings, as transformers' AutoTokenizer wants them (the
    # tokenizer fixtures also spell them {"content": ...} to test ps_train's reader).
    config_path = os.path.join(out, "tokenizer_config.json")
    if os.path.exists(config_path):
        tc = json.load(open(config_path))
        tc = {k: v["content"] if isinstance(v, dict) and "content" in v else v for k, v in tc.items()}
        json.dump(tc, open(config_path, "w"), indent=2)
    print(f"wrote {out}: {sorted(os.listdir(out))}, vocab {common['vocab_size']}")


def main():
    for name in sys.argv[1:] or PAIRS:  # e.g. `gen_llama_path_fixture.py llama_chat`: that one only
        make(name)


if __name__ == "__main__":
    main()
