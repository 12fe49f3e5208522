#!/usr/bin/env python3
"""Writes the golden fixtures of the Llama-family tokenizers (developer-run, not in CI).

Trains small BPE tokenizers with HF `tokenizers` (no download) on the corpus of
gen_tokenizer_fixtures.py, configured as each family's tokenizer.json is:
  llama3/         byte-level BPE, ignore_merges (and whole words without merges), Llama 3's Split regex (digits in groups of
                  1-3), BOS by TemplateProcessing, tokenizer_config.json (eos_token)
  qwen2/          NFC, Qwen2's Split regex (single digits), byte-level BPE; an added token
                  with normalized=true
  smollm2/        Sequence of Digits(individual_digits) and ByteLevel (with its regex)
  spm_legacy/     SentencePiece-style BPE as Llama 2 / TinyLlama: Prepend("▁") + Replace
                  normalizer, byte_fallback to <0xNN>, fuse_unk, the Replace/ByteFallback/
                  Fuse/Strip decoder, "<s> $A", tokenizer_config.json add_bos_token
  spm_metaspace/  as Mistral: Metaspace(prepend_scheme first, split false), the same decoder,
                  tokenizer_config.json add_bos_token and add_eos_token (EOS added)
  spm_split/      Metaspace(always, split true) with the Metaspace + ByteFallback decoders
and golden_families.json: per fixture HF's ids of each case without and with special
tokens, whether decode(encode(x)) == x in HF, HF's decode of those ids and of random id
lists, plus "variants": pipelines (normalizer / pre_tokenizer JSON) swapped into llama3's
tokenizer.json with their ids (Split behaviours, invert, Strip, NFKC, Replace regex).

usage: tools/gen_family_tokenizers.py [OUT_DIR]   (default tests/tokenizer/testdata)
"""
import json
import os
import random
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_tokenizer_fixtures as base  # noqa: E402

LLAMA3 = base.LLAMA3_PATTERN
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
         r"\s+(?!\S)|\s+")
BYTES = ["<0x%02X>" % b for b in range(256)]
EXTRA = ["<|begin_of_text|>hi", "<s>hi</s>", "<s> hi", " <unk> ", "12345678901 3.14 ٣٤٥ ²³", "  leading\tmix  \n",
         "<0x41> literal", "\u2581already\u2581metaspace", "cafe\u0301 café", "ＡＢＣ ｆｕｌｌ", "a\u00a0b",
         "<|im_start|>user\nhello<|im_end|>\n", "x <|eot_id|> y", "Hello World", "💩💩 𝔘𝔫𝔦"]


def cases(special):
    return [t for t in base.short_cases(special) if len(t) < 400][:70] + EXTRA


def byte_level_bpe(pre, vocab_size, specials, normalizer=None, ignore_merges=False):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(base.corpus(), trainer=trainer)
    return tok


def spm_bpe(vocab_size=700):
    """SentencePiece-style BPE: <unk> <s> </s>, then the 256 byte tokens in the model vocab."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=["<unk>", "<s>", "</s>"] + BYTES,
                                  limit_alphabet=120, show_progress=False)
    tok.train_from_iterator(base.corpus(), trainer=trainer)
    j = json.loads(tok.to_str())
    j["added_tokens"] = [t for t in j["added_tokens"] if t["content"] not in BYTES]  # model vocab, as Llama 2's
    return Tokenizer.from_str(json.dumps(j))


def with_whole_words(tok, words):
    """Adds `words` to the model vocabulary with no merge making them, as Llama 3's vocabulary
    has tokens that only ignore_merges reaches."""
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    for w in words:
        if w not in vocab:
            vocab[w] = max(vocab.values()) + 1
    return Tokenizer.from_str(json.dumps(j))


def llama2_decoder():
    return decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                              decoders.Strip(" ", 1, 0)])


def template(tok, bos):
    return processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                         special_tokens=[(bos, tok.token_to_id(bos))])


def make_all():
    """name -> (tokenizer, tokenizer_config or None, separator token)."""
    out = {}
    llama = byte_level_bpe(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), 700,
        ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"], ignore_merges=True)
    llama = with_whole_words(llama, ["\u0120jumps", "\u0120lazy", "\u0120document", "\u0120Hello"])
    llama.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False),
                                                template(llama, "<|begin_of_text|>")])
    out["llama3"] = (llama, {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}, "<|end_of_text|>")
    qwen = byte_level_bpe(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), 700,
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], normalizer=normalizers.NFC())
    qwen.add_tokens([AddedToken("café", normalized=True)])
    out["qwen2"] = (qwen, {"eos_token": "<|im_end|>", "bos_token": None}, "<|endoftext|>")
    smol = byte_level_bpe(pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]), 700,
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    out["smollm2"] = (smol, None, "<|endoftext|>")

    legacy = spm_bpe()
    legacy.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    legacy.pre_tokenizer = None
    legacy.decoder = llama2_decoder()
    legacy.post_processor = template(legacy, "<s>")
    cfg = {"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": True, "add_eos_token": False,
           "bos_token": "<s>", "eos_token": "</s>"}
    out["spm_legacy"] = (legacy, cfg, "</s>")
    mistral = spm_bpe()
    mistral.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    mistral.decoder = llama2_decoder()
    mistral.post_processor = template(mistral, "<s>")
    cfg = {"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": True, "add_eos_token": True,
           "bos_token": {"content": "<s>"}, "eos_token": "</s>"}
    out["spm_metaspace"] = (mistral, cfg, "</s>")
    split = spm_bpe(500)
    split.decoder = decoders.Sequence([decoders.ByteFallback(),
                                       decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)])
    out["spm_split"] = (split, None, "</s>")
    return out


def with_config(tok, cfg):
    """HF ids with special tokens as transformers 4 gives them: for its Llama tokenizer
    classes add_bos/add_eos override the post-processor's (tokenizer/tokenizer.cc)."""
    llama_class = cfg and cfg.get("tokenizer_class") in ("LlamaTokenizer", "LlamaTokenizerFast")
    if not llama_class or "add_bos_token" not in cfg:
        return lambda t: tok.encode(t).ids
    bos = tok.token_to_id(cfg["bos_token"]["content"] if isinstance(cfg["bos_token"], dict) else cfg["bos_token"])
    eos = tok.token_to_id(cfg["eos_token"])
    pre = [bos] if cfg["add_bos_token"] else []
    post = [eos] if cfg.get("add_eos_token") else []
    return lambda t: pre + tok.encode(t, add_special_tokens=False).ids + post


def golden(tok, cfg, texts, rng):
    special = with_config(tok, cfg)
    enc = []
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids
        decoded = tok.decode(ids, skip_special_tokens=False)
        enc.append({"text": t, "ids": ids, "special_ids": special(t), "decoded": decoded, "roundtrip": decoded == t})
    n = tok.get_vocab_size()
    extra = [[], list(range(min(n, 300))), [rng.randrange(n) for _ in range(100)]]
    extra += [[rng.randrange(n) for _ in range(rng.randint(1, 8))] for _ in range(15)]
    dec = [{"ids": ids, "text": tok.decode(ids, skip_special_tokens=False)} for ids in extra]
    return {"vocab_size": n, "encode": enc, "decode": dec}


def variants(llama, texts):
    """Pipelines swapped into llama3's tokenizer.json, with HF's ids."""
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    pres = [pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r"\s+"), behavior=b, invert=inv), bl])
            for b in ["removed", "merged_with_previous", "merged_with_next", "contiguous", "isolated"]
            for inv in [False, True]]
    pres += [pre_tokenizers.Sequence([pre_tokenizers.Split(" ", behavior="merged_with_previous"), bl]),
             pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=False), bl]),
             pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)]
    norms = [normalizers.Strip(left=True, right=True), normalizers.NFKC(),
             normalizers.Sequence([normalizers.NFD(), normalizers.Replace(Regex(r"\p{Mn}+"), "")]),
             normalizers.Sequence([normalizers.Strip(left=False, right=True), normalizers.Prepend(">")])]
    out = []
    base_json = llama.to_str()
    for p in pres + norms:
        tok = Tokenizer.from_str(base_json)
        if p in pres:
            tok.pre_tokenizer = p
        else:
            tok.normalizer = p
        j = json.loads(tok.to_str())
        out.append({"normalizer": j["normalizer"], "pre_tokenizer": j["pre_tokenizer"],
                    "encode": [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in texts]})
    return out


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/tokenizer/testdata"
    rng = random.Random(5)
    result = {}
    for name, (tok, cfg, sep) in make_all().items():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        if cfg:
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                json.dump(cfg, f, indent=2, ensure_ascii=False)
        result[name] = golden(tok, cfg, cases(sep), rng)
        if name == "llama3":
            result["variants"] = variants(tok, [t for t in cases(sep) if len(t) < 100][:24])
    with open(os.path.join(out, "golden_families.json"), "w") as f:
        json.dump(result, f, ensure_ascii=True, indent=None, separators=(",", ":"))
    for name in [n for n in result if n != "variants"] + ["golden_families.json"]:
        p = os.path.join(out, name)
        size = sum(os.path.getsize(os.path.join(p, x)) for x in os.listdir(p)) if os.path.isdir(p) else os.path.getsize(p)
        print(f"{name}: {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
