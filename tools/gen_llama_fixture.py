#!/usr/bin/env python3
"""Writes tests/models/testdata/llama_family/{llama,qwen2,qwen3,mistral}/: tiny HF folders.

One random-weight model per Llama-family architecture ps_train reads (model.type: llama),
made by `transformers` itself, with the golden logits and loss the C++ tests compare with
(tests/models/llama_test.cc). Run once by a developer when the fixtures have to change; CI
never runs it. Needs torch, transformers and safetensors (PyPI), no downloads:

  source tools/python_peer_env.sh && python3 tools/gen_llama_fixture.py

Each folder holds what save_pretrained writes (config.json, generation_config.json, the
weights) plus reference.safetensors:
    input_ids  int64   [2, SEQ]          random ids
    targets    int64   [2, SEQ]          the next ids (input_ids shifted by one)
    logits     float32 [2, SEQ, VOCAB]   eval-mode fp32 logits
    loss       float32 []                mean next-token cross-entropy
Every parameter, biases and norm weights included, is drawn at random (HF initialises
biases to 0 and norms to 1, which would hide a bias or a scale applied wrongly); weights
saved in bf16/fp16 are rounded first, so the fp32 reference uses the values stored.

  llama    LlamaForCausalLM: GQA 4/2, explicit head_dim 16 (hidden 32), rope llama3
           (factor 8, original context 32 < SEQ), untied head, weights in bf16.
  qwen2    Qwen2ForCausalLM: MQA 4/1, q/k/v biases, tied, rms eps 1e-6, weights in fp16.
  qwen3    Qwen3ForCausalLM: q/k RMSNorm per head, explicit head_dim 16, tied, fp32,
           sharded (model.safetensors.index.json).
  mistral  MistralForCausalLM: sliding window 8 < SEQ, rope linear (factor 2), untied, fp32.
"""
import os

import torch
from safetensors.torch import save_file
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "models", "testdata", "llama_family")
VOCAB = 64
SEQ = 40
COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=64, bos_token_id=1, eos_token_id=2, pad_token_id=None)

FAMILIES = {
    "llama": (LlamaConfig, LlamaForCausalLM, torch.bfloat16, None,
              dict(num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5, tie_word_embeddings=False,
                   rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                    "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 32})),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, torch.float16, None,
              dict(num_key_value_heads=1, rms_norm_eps=1e-6, tie_word_embeddings=True,
                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, torch.float32, "40KB",
              dict(num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6, tie_word_embeddings=True,
                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "mistral": (MistralConfig, MistralForCausalLM, torch.float32, None,
                dict(num_key_value_heads=2, sliding_window=8, rms_norm_eps=1e-5, tie_word_embeddings=False,
                     rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0})),
}


def randomise(model, dtype):
    """Every parameter random (norm weights around 1), rounded to the dtype saved."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
            p.copy_(p.to(dtype).to(torch.float32))


def make(name, config_cls, model_cls, dtype, shard, extra):
    out = os.path.join(OUT, name)
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        os.remove(os.path.join(out, f))
    torch.manual_seed(sum(map(ord, name)))
    config = config_cls(**COMMON, **extra, attn_implementation="eager")
    model = model_cls(config).to(torch.float32).eval()
    randomise(model, dtype)
    tokens = torch.randint(0, VOCAB, (2, SEQ + 1), dtype=torch.int64)
    inputs, targets = tokens[:, :SEQ].contiguous(), tokens[:, 1:].contiguous()
    with torch.no_grad():
        logits = model(input_ids=inputs).logits.float()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
        hf = model(input_ids=inputs, labels=inputs).loss  # HF shifts the labels itself
        own = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), inputs[:, 1:].reshape(-1))
        assert torch.allclose(hf, own, atol=1e-6), (hf, own)
        sdpa = model_cls(config).eval()
        sdpa.load_state_dict(model.state_dict())
        sdpa.config._attn_implementation = "sdpa"
        assert torch.allclose(sdpa(input_ids=inputs).logits, logits, atol=1e-5), "eager and sdpa disagree"
    saved = model.to(dtype)
    kwargs = {"max_shard_size": shard} if shard else {}
    saved.save_pretrained(out, safe_serialization=True, **kwargs)
    save_file({"input_ids": inputs, "targets": targets, "logits": logits.contiguous(), "loss": loss.reshape(())},
              os.path.join(out, "reference.safetensors"))
    print(f"wrote {out}: {sorted(os.listdir(out))}, loss {loss.item():.6f}")


def main():
    for name, spec in FAMILIES.items():
        make(name, *spec)


if __name__ == "__main__":
    main()
