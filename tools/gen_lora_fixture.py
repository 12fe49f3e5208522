#!/usr/bin/env python3
"""Writes tests/models/testdata/lora/{llama,gpt2,bert}/: PEFT LoRA references for the parity test
of ps_train's adapters (tests/trainer/lora_train_test.cc).

For each base (the tiny HF folders tests/models/testdata/llama_family/llama, bf16 weights
loaded in fp32, and tests/models/testdata/gpt2_tiny_hf, whose Conv1D layers PEFT adapts
with fan_in_fan_out), PEFT's get_peft_model with the settings below, then:

  init/                      the adapter as PEFT initialised it (save_pretrained: A
                             Kaiming-uniform, B zero), which the test starts from
                             (lora.init_from)
  reference.safetensors      input_ids [STEPS, B, T] (random tokens, seed 0), losses
                             [STEPS] (each step's loss before its update, HF's
                             labels=input_ids), and "final.<PEFT key>": the adapter after
                             STEPS steps of torch AdamW with clip_grad_norm_

bert/ is a classifier's: see make_bert. Developer-run when the fixtures must change; needs torch, transformers and peft, no
downloads:

  source tools/python_peer_env.sh && pip install --no-deps peft accelerate
  python3 tools/gen_lora_fixture.py [llama|gpt2|bert ...]
"""
import os
import sys

import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "models", "testdata", "lora")

STEPS, B, T = 20, 2, 16
LR, BETAS, EPS, WEIGHT_DECAY, CLIP = 1e-2, (0.9, 0.999), 1e-8, 0.01, 1.0

# name -> (base folder, LoraConfig arguments)
CASES = {
    "llama": ("tests/models/testdata/llama_family/llama",
              dict(r=4, lora_alpha=8, lora_dropout=0.0,
                   target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])),
    "gpt2": ("tests/models/testdata/gpt2_tiny_hf",
             dict(r=4, lora_alpha=4, lora_dropout=0.0, use_rslora=True, target_modules=["c_attn", "c_proj", "c_fc"])),
}


def train(model, batches):
    """A step of torch AdamW with clip_grad_norm_ per batch (a dict of the model's inputs)
    over the trainable parameters; each step's loss before its update."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY)
    model.train()
    losses = []
    for batch in batches:
        opt.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, CLIP)
        opt.step()
        losses.append(loss.item())
    return losses


def make(name):
    base, lora_args = CASES[name]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)  # relative: the config names it so
    model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **lora_args))
    out = os.path.join(OUT, name)
    init = os.path.join(out, "init")
    model.save_pretrained(init)
    os.remove(os.path.join(init, "README.md"))  # PEFT's model card template: not needed
    os.chmod(os.path.join(init, "adapter_model.safetensors"), 0o644)
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, vocab, (STEPS, B, T), generator=gen)
    losses = train(model, [dict(input_ids=input_ids[step], labels=input_ids[step]) for step in range(STEPS)])
    tensors = {"input_ids": input_ids, "losses": torch.tensor(losses, dtype=torch.float32)}
    for key, value in model.state_dict().items():
        if ".lora_" in key:
            tensors["final." + key.replace(".default", "")] = value.detach().contiguous()
    save_file(tensors, os.path.join(out, "reference.safetensors"))
    os.chmod(os.path.join(out, "reference.safetensors"), 0o644)
    print(f"{name}: losses {losses[0]:.4f} -> {losses[-1]:.4f}, {len(tensors) - 2} adapter tensors")


BERT_BASE = "tests/models/testdata/bert_tiny_hf"
BERT_LABELS = 3


def make_bert():
    """BertForSequenceClassification on the tiny MLM folder (its pooler and classifier drawn
    by HF from seed 0, dropout off), PEFT's SEQ_CLS task: adapters on query, key, value and
    every dense (the pooler's too), the classifier trained whole (modules_to_save).
    Writes bert/base/ (the base with its new head: the run's model.init_from), bert/init/
    and reference.safetensors with input_ids [STEPS, B, T], labels [STEPS, B], losses and
    "final.<PEFT key>" for the factors and the classifier."""
    from transformers import BertForSequenceClassification
    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(
        BERT_BASE, num_labels=BERT_LABELS, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        classifier_dropout=0.0, dtype=torch.float32)
    out = os.path.join(OUT, "bert")
    model.save_pretrained(os.path.join(out, "base"))
    os.chmod(os.path.join(out, "base", "model.safetensors"), 0o644)
    model = get_peft_model(model, LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8, lora_dropout=0.0,
                                             target_modules=["query", "key", "value", "dense"]))
    init = os.path.join(out, "init")
    model.save_pretrained(init)
    os.remove(os.path.join(init, "README.md"))
    os.chmod(os.path.join(init, "adapter_model.safetensors"), 0o644)
    gen = torch.Generator().manual_seed(0)
    input_ids = torch.randint(1, model.config.vocab_size, (STEPS, B, T), generator=gen)
    labels = torch.randint(0, BERT_LABELS, (STEPS, B), generator=gen)
    losses = train(model, [dict(input_ids=input_ids[step], labels=labels[step]) for step in range(STEPS)])
    tensors = {"input_ids": input_ids, "labels": labels, "losses": torch.tensor(losses, dtype=torch.float32)}
    for key, value in model.state_dict().items():
        if ".lora_" in key:
            tensors["final." + key.replace(".default", "")] = value.detach().contiguous()
        elif ".modules_to_save.default." in key:
            tensors["final." + key.replace(".modules_to_save.default", "")] = value.detach().contiguous()
    save_file(tensors, os.path.join(out, "reference.safetensors"))
    os.chmod(os.path.join(out, "reference.safetensors"), 0o644)
    print(f"bert: losses {losses[0]:.4f} -> {losses[-1]:.4f}, {len(tensors) - 3} final tensors")


def main():
    os.chdir(ROOT)
    names = sys.argv[1:] or list(CASES) + ["bert"]  # e.g. `gen_lora_fixture.py bert`: that one only
    for name in names:
        make_bert() if name == "bert" else make(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
