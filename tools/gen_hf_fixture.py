#!/usr/bin/env python3
"""Writes tests/models/testdata/gpt2_tiny_hf/: a tiny HF GPT-2 folder with a trained tokenizer.

The fixture of the fine-tuning path (model.init_from, ps_export, ps_sample, ps_prep): what a
user downloads from the Hub, at toy size and with random weights. Run once by a developer
when the fixture has to change; CI never runs it (the C++ and shell tests read the committed
files). Needs torch, transformers and tokenizers (PyPI), no downloads:

  source tools/python_peer_env.sh && python3 tools/gen_hf_fixture.py

Writes, into the folder:
  config.json, model.safetensors     GPT2LMHeadModel.save_pretrained (tied head; n_layer 2,
                                     n_head 4, n_embd 64, n_positions 1024 (so the shipped configs'
                                     sequence lengths fit), vocab = tokenizer's)
  tokenizer.json, vocab.json, merges.txt, tokenizer_config.json, special_tokens_map.json
                                     GPT2TokenizerFast.save_pretrained of a byte-level BPE
                                     trained by `tokenizers` on tools/make_corpus.py text
  reference.safetensors              what the tests compare with:
      tokens   int64   [33]          ids of REFERENCE_TEXT (tokenizer.encode)
      logits   float32 [2, 16, V]    eval-mode logits of the windows tokens[16 i : 16 i + 16]
      loss     float32 []            mean next-token cross-entropy of those two windows with
                                     targets tokens[16 i + 1 : 16 i + 17] (ps_train's sampler
                                     cuts samples this way)
  reference_text.txt                 REFERENCE_TEXT
"""
import os
import random
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import save_file
from tokenizers import ByteLevelBPETokenizer
from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "models", "testdata", "gpt2_tiny_hf")
VOCAB = 320
SEQ = 16
REFERENCE_TEXT = ("The quiet engineer walks to the old bridge. The children of the village "
                  "sing near the harbor while a distant storm waits over the mountain.")


def train_tokenizer(workdir):
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_corpus.py"), workdir], check=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train([os.path.join(workdir, "train.txt")], vocab_size=VOCAB, min_frequency=2,
              special_tokens=["<|endoftext|>"])
    fast = GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<|endoftext|>",
                             eos_token="<|endoftext|>", unk_token="<|endoftext|>")
    return fast


def main():
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as workdir:
        tok = train_tokenizer(workdir)
    tok.save_pretrained(OUT)
    eot = tok.convert_tokens_to_ids("<|endoftext|>")
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=1024, vocab_size=len(tok),
                        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, layer_norm_epsilon=1e-5, tie_word_embeddings=True,
                        bos_token_id=eot, eos_token_id=eot)
    model = GPT2LMHeadModel(config).to(torch.float32).eval()
    model.save_pretrained(OUT, safe_serialization=True)

    ids = tok.encode(REFERENCE_TEXT)
    assert len(ids) >= 2 * SEQ + 1, f"reference text has only {len(ids)} tokens"
    tokens = torch.tensor(ids[:2 * SEQ + 1], dtype=torch.int64)
    inputs = torch.stack([tokens[i * SEQ:i * SEQ + SEQ] for i in range(2)])
    targets = torch.stack([tokens[i * SEQ + 1:i * SEQ + SEQ + 1] for i in range(2)])
    with torch.no_grad():
        logits = model(input_ids=inputs).logits.float()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, config.vocab_size), targets.reshape(-1))
        # HF's own loss (labels = inputs) on one window restated: the same cross-entropy.
        hf = model(input_ids=tokens[:SEQ + 1].unsqueeze(0), labels=tokens[:SEQ + 1].unsqueeze(0)).loss
        own = torch.nn.functional.cross_entropy(logits[0], targets[0])
        assert torch.allclose(hf, own, atol=1e-6), (hf, own)
    save_file({"tokens": tokens, "logits": logits.contiguous(), "loss": loss.reshape(())},
              os.path.join(OUT, "reference.safetensors"))
    with open(os.path.join(OUT, "reference_text.txt"), "w") as f:
        f.write(REFERENCE_TEXT)
    print(f"wrote {OUT}: vocab {len(tok)}, eot {eot}, loss {loss.item():.6f}")


if __name__ == "__main__":
    random.seed(0)
    main()
