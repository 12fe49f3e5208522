#!/usr/bin/env python3
"""Writes tests/models/testdata/bert_tiny_hf/ and bert_tiny_cls_hf/: tiny HF BERT folders.

The fixtures of the BERT model (models/bert.h) and its HF import/export: a BertForMaskedLM
and a BertForSequenceClassification (3 labels) sharing one random encoder, with a WordPiece
tokenizer trained by `tokenizers` on tools/make_corpus.py text. Run once by a developer when
the fixtures have to change; CI only reads the committed files. Needs torch, transformers
and tokenizers (PyPI), no downloads:

  source tools/python_peer_env.sh && python3 tools/gen_bert_fixture.py

Each folder: config.json, model.safetensors, tokenizer.json, tokenizer_config.json
(save_pretrained), plus reference.safetensors, eval-mode outputs for a padded batch:
  input_ids, token_type_ids, attention_mask  int64 [2, 16]  (row 1 padded;
                                                              segments A then B)
  MLM folder:  labels int64 [2, 16] (-100 except 4 positions), logits float32 [2, 16, V],
               loss float32 [] (HF's masked-LM loss)
  cls folder:  labels int64 [2], logits float32 [2, 3], loss float32 []
"""
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import save_file
from tokenizers import BertWordPieceTokenizer
from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification, BertTokenizerFast

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TESTDATA = os.path.join(ROOT, "tests", "models", "testdata")


def tokenizer(workdir):
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_corpus.py"), workdir], check=True,
                   stdout=subprocess.DEVNULL)
    wp = BertWordPieceTokenizer(lowercase=True)
    wp.train([os.path.join(workdir, "train.txt")], vocab_size=400, min_frequency=2,
             special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    return BertTokenizerFast(tokenizer_object=wp._tokenizer, do_lower_case=True)


def batch(tok):
    a = tok("the quiet engineer walks", "to the old bridge")
    b = tok("a storm waits")
    n = 16
    ids, types, mask = [], [], []
    for enc in (a, b):
        pad = n - len(enc["input_ids"])
        assert pad >= 0
        ids.append(enc["input_ids"] + [tok.pad_token_id] * pad)
        types.append(enc["token_type_ids"] + [0] * pad)
        mask.append(enc["attention_mask"] + [0] * pad)
    return torch.tensor(ids), torch.tensor(types), torch.tensor(mask)


def main():
    with tempfile.TemporaryDirectory() as workdir:
        tok = tokenizer(workdir)
    ids, types, mask = batch(tok)
    config = BertConfig(vocab_size=len(tok), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=128, type_vocab_size=2,
                        hidden_act="gelu", layer_norm_eps=1e-12, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    mlm = BertForMaskedLM(config).eval()
    # Non-zero biases and norms, so the test sees them.
    with torch.no_grad():
        for name, p in mlm.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    labels = torch.full_like(ids, -100)
    for r, c in [(0, 2), (0, 5), (1, 1), (1, 3)]:
        labels[r, c] = ids[r, c]
    with torch.no_grad():
        out = mlm(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=labels)
    folder = os.path.join(TESTDATA, "bert_tiny_hf")
    mlm.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    save_file({"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "labels": labels,
               "logits": out.logits.float().contiguous(), "loss": out.loss.reshape(())},
              os.path.join(folder, "reference.safetensors"))

    config.num_labels = 3
    cls = BertForSequenceClassification(config).eval()
    cls.bert.load_state_dict(mlm.bert.state_dict(), strict=False)  # same encoder; pooler is its own
    with torch.no_grad():
        cls.bert.pooler.dense.bias.add_(0.1)
        cls_labels = torch.tensor([2, 0])
        out = cls(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=cls_labels)
    folder = os.path.join(TESTDATA, "bert_tiny_cls_hf")
    cls.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    save_file({"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "labels": cls_labels,
               "logits": out.logits.float().contiguous(), "loss": out.loss.reshape(())},
              os.path.join(folder, "reference.safetensors"))
    print(f"vocab {len(tok)}; classification loss {out.loss.item():.5f}")


if __name__ == "__main__":
    main()
