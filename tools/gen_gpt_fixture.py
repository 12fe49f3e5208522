#!/usr/bin/env python3
"""Writes tests/models/testdata/gpt2_tiny_hf.safetensors: a reference GPT-2 from HF transformers.

Run once by a developer when the fixture has to change; CI never runs it (the C++ tests
only read the committed file). Needs torch, transformers and safetensors:

  source tools/python_peer_env.sh && python3 tools/gen_gpt_fixture.py

Contents: every tensor of GPT2LMHeadModel.state_dict() under its HF name ("transformer.h.0.
attn.c_attn.weight", ...; HF's Conv1D stores weights as [in, out], the transpose of
nn.Linear), except lm_head.weight, which is tied to (shares memory with)
transformer.wte.weight; plus
  fixture.input_ids  int64   [2, 16]       random ids (seeded)
  fixture.logits     float32 [2, 16, 101]  eval-mode logits for them
  fixture.loss       float32 []            HF loss with labels=input_ids: mean cross-entropy
                                           of logits[:, :-1] against input_ids[:, 1:]
"""
import os

import torch
import transformers
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models", "testdata",
                   "gpt2_tiny_hf.safetensors")


def main():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=32, vocab_size=101,
                        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, layer_norm_epsilon=1e-5, tie_word_embeddings=True)
    model = GPT2LMHeadModel(config).to(torch.float32).eval()
    input_ids = torch.randint(0, config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(input_ids=input_ids, labels=input_ids)
        logits = out.logits.float()
        # The loss HF computes, restated: next-token cross-entropy.
        manual = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, config.vocab_size),
                                                   input_ids[:, 1:].reshape(-1))
        assert torch.allclose(out.loss, manual, atol=1e-6), (out.loss, manual)

    state = model.state_dict()
    wte = state["transformer.wte.weight"]
    tensors = {}
    for name, t in state.items():
        if name == "lm_head.weight" and t.data_ptr() == wte.data_ptr():
            continue  # tied to wte; safetensors refuses tensors that share memory
        tensors[name] = t.detach().contiguous().clone()
    tensors["fixture.input_ids"] = input_ids.to(torch.int64).contiguous()
    tensors["fixture.logits"] = logits.contiguous()
    tensors["fixture.loss"] = out.loss.detach().float().reshape(())
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    # One metadata key: safetensors writes several in random order, and the file should be
    # byte-identical when regenerated with the same versions.
    save_file(tensors, OUT, metadata={"generator": f"tools/gen_gpt_fixture.py, transformers "
                                      f"{transformers.__version__}, torch {torch.__version__}"})
    print(f"wrote {os.path.normpath(OUT)} ({os.path.getsize(OUT)} bytes), loss {out.loss.item():.6f}")
    for name, t in tensors.items():
        print(f"  {name:45s} {str(t.dtype):14s} {list(t.shape)}")


if __name__ == "__main__":
    main()
