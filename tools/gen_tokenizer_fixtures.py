#!/usr/bin/env python3
"""Writes the golden tokenizer fixtures of tests/tokenizer/ (developer-run, not in CI).

Trains three small tokenizers with HF `tokenizers` on a generated corpus (no download):
  bpe/                 byte-level BPE as GPT-2 (vocab 1000 + <|endoftext|>):
                       tokenizer.json, vocab.json, merges.txt
  wordpiece_uncased/   BERT WordPiece, lowercase (strip_accents follows): tokenizer.json, vocab.txt
  wordpiece_cased/     BERT WordPiece, cased, strip_accents false: tokenizer.json, vocab.txt,
                       tokenizer_config.json (do_lower_case false)
  bpe_split/           byte-level BPE as Llama 3's (600 ids): a Split pre-tokenizer with its
                       regex, ByteLevel without regex, ignore_merges
  bpe_flags/, wordpiece_flags/   tokenizer.json of bpe (with add_prefix_space) and
                       wordpiece_uncased plus added tokens using the flags lstrip, rstrip,
                       single_word, normalized
and golden.json: for each, HF's ids of every case (`encode(text, add_special_tokens=False)`)
and HF's `decode(ids, skip_special_tokens=False)` of those ids and of extra id lists.

usage: tools/gen_tokenizer_fixtures.py [OUT_DIR]   (default tests/tokenizer/testdata)
"""
import json
import os
import random
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from tokenizers.implementations import BertWordPieceTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_corpus  # noqa: E402  (the project's sentence grammar)

CODE = [
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += x[i] * 2;\n}\n",
    "if x != None and y >= 3.14: print(f\"{x!r}\")  # comment\n",
    "std::vector<int32_t> ids = tok->Encode(text);  // C++\n",
    "SELECT name, COUNT(*) FROM users WHERE age > 21 GROUP BY name;\n",
    "<div class=\"main\">Hello &amp; welcome</div>\n",
]
UNICODE = [
    "Café, naïve façade, résumé, crème brûlée, Ångström, Øresund, Straße.",
    "Él está aquí. ¿Qué tal? ¡Muy bien! Ça va très bien, merci.",
    "東京は日本の首都です。北京欢迎你。서울은 한국의 수도입니다.",
    "Emoji: 😀 😂 👍🏽 ❤️ 🚀 🇫🇷 👨‍👩‍👧 — done…",
    "Combining: e\u0301 a\u0308 n\u0303 o\u0302\u0323 (decomposed) vs é ä ñ ộ.",
    "RTL: שלום עולם! مرحبا بالعالم. ١٢٣ ٤٥٦",
    "Greek ΑΒΓ αβγ Σίσυφος; Cyrillic Привет, мир! ΣΑΣ",
    "Math ∑ x² ≤ ∞ ± √2 ≈ 1.414 × 10³ ½ ⅔ Ⅻ",
]


def corpus(seed=7):
    rng = random.Random(seed)
    lines = []
    for i in range(6000):
        lines.append(make_corpus.sentence(rng))
        if i % 10 == 0:
            lines.append(rng.choice(CODE))
        if i % 7 == 0:
            lines.append(rng.choice(UNICODE))
        if i % 13 == 0:
            lines.append(f"In {rng.randint(1900, 2030)} they paid ${rng.randint(1, 99999)}.{rng.randint(0, 99):02d}, "
                         f"don't they'll we're I'm it's you've he'd.")
    return lines


def long_text(seed, n_bytes):
    rng = random.Random(seed)
    parts = []
    size = 0
    while size < n_bytes:
        kind = rng.random()
        if kind < 0.6:
            p = make_corpus.sentence(rng) + rng.choice([" ", "  ", "\n", "\n\n", "\t"])
        elif kind < 0.8:
            p = rng.choice(CODE)
        else:
            p = rng.choice(UNICODE) + " "
        parts.append(p)
        size += len(p.encode())
    return "".join(parts)


def cases(special):
    """Texts every tokenizer is checked on; `special` is its separator token."""
    c = [
        "",
        " ",
        "Hello world",
        "The quick brown fox jumps over the lazy dog.",
        "Hello, World! How are you today?",
        "don't won't can't I'm you're we've they'll she'd it's Tom's",
        "DON'T I'M WE'LL 'S 'T 're ''s !'s",
        "Numbers: 0 1 12 123 1234 12345 3.14159 -42 1e10 1,000,000 ５ ²",
        "In 1999 they paid $12,345.67 for 2 items (50% off).",
        "multiple   spaces    here",
        "tabs\there\t\tand\t\t\tthere",
        "line one\nline two\n\nline four\r\nwindows\r\n",
        "trailing spaces   ",
        "   leading spaces",
        "trailing newline\n",
        "\n\n\n",
        " \t \n ",
        "mixed \t\n whitespace \u00a0nbsp\u2003emsp\u3000ideo\u000bvt\u0085nel\u2028ls",
        "word\u200bzero\u200dwidth\ufeffbom",
        "control\x01\x02chars\x7f and nul\x00inside",
        "replacement \ufffd char",
        "private use \ue000\U000f0000 and unassigned \U000e0080 \u0378",
        "newer emoji 🥰🫠🧑‍💻 and old 😀",
        "punctuation!!! ??? ... ,,, ;;; ::: --- ___ ((( ))) [[[ ]]] {{{ }}} \"\"\" '''",
        "em—dash – en‐dash «quotes» „Anführung“ 「引用」 『二重』 ¿¡ §¶ •·",
        "under_score snake_case CamelCase kebab-case dot.case",
        "email me at someone@example.com or visit https://example.org/path?q=1&r=2#frag",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "x" * 99 + " " + "y" * 100 + " " + "z" * 101,
        # Words of 128 bytes and more (BPE merges them through its heap).
        "a" * 300,
        "thethe" * 60 + " " + "ab" * 70,
        "東京" * 50,
        "".join(random.Random(9).choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz") for _ in range(400)),
        "ﬁ ligature ﬀ Ⅸ ℌ ℃ ㎞ ｆｕｌｌｗｉｄｔｈ",
        "İstanbul ß ẞ Σ ς ǅ ǈ",
        special,
        f"Hello{special}world",
        f"first document.{special}second document.",
        f" {special} spaced {special}{special} twice ",
        f"{special}\n{special}",
        special[:-1],
        special.lower() + " " + special.upper(),
    ] + CODE + UNICODE
    c.append(long_text(11, 4096))
    c.append(long_text(12, 3000))
    return c + random_cases(21, 150)


# Characters where the pre-tokenizers' alternatives, the normaliser and the added-token
# search meet; random_cases() strings them together.
POOL = ["a", "B", "xyz", "é", "e\u0301", "a\u0301\u0316", "\U0001d165\u0301", "東", "한", "\u1100\u1161", "1",
        "42", "٣", "²", "Ⅻ", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u0085", "\v", "\f", "'", "'s",
        "'re", "'ll", "!", ".", "-", "_", "😀", "🥰", "\u200b", "\u200d", "\x00", "\x01", "\ufffd", "İ", "ß", "Σ",
        "ﬁ", "ǅ", "ᾼ", "\ue000", "\u0378", "<|endoftext|>", "<|endo", "[SEP]", "[sep]", "[CLS]", "##", "don't"]


def random_cases(seed, count):
    rng = random.Random(seed)
    return ["".join(rng.choice(POOL) for _ in range(rng.randint(1, 16))) for _ in range(count)]


def short_cases(special):
    """The cases less the long texts, and fewer random ones (for the flag variants)."""
    return [t for t in cases(special) if len(t) < 1000][:100]


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")


def train_bpe(lines, split=False):
    if split:
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600 if split else 1001, min_frequency=2, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(lines, trainer=trainer)
    return tok


def train_wordpiece(lines, lowercase, strip_accents):
    tok = BertWordPieceTokenizer(clean_text=True, handle_chinese_chars=True, strip_accents=strip_accents,
                                 lowercase=lowercase)
    tok.train_from_iterator(lines, vocab_size=1000, min_frequency=2, show_progress=False,
                            special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    return tok


def add_flag_tokens(tok):
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, single_word=False, normalized=False)])
    tok.add_tokens([AddedToken("xyzzy", single_word=True, normalized=True),
                    AddedToken("Hello World", rstrip=True, normalized=True)])


def golden(tok, texts, rng):
    enc = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in texts]
    n = tok.get_vocab_size()
    extra = [[], [0], list(range(min(n, 40))), [rng.randrange(n) for _ in range(200)]]
    extra += [[rng.randrange(n) for _ in range(rng.randint(1, 12))] for _ in range(30)]
    dec = [{"ids": e["ids"], "text": tok.decode(e["ids"], skip_special_tokens=False)} for e in enc]
    dec += [{"ids": ids, "text": tok.decode(ids, skip_special_tokens=False)} for ids in extra]
    return {"vocab_size": n, "encode": enc, "decode": dec}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/tokenizer/testdata"
    lines = corpus()
    rng = random.Random(3)
    result = {}

    bpe = train_bpe(lines)
    d = os.path.join(out, "bpe")
    os.makedirs(d, exist_ok=True)
    bpe.save(os.path.join(d, "tokenizer.json"))
    bpe.model.save(d)  # vocab.json + merges.txt
    result["bpe"] = golden(bpe, cases("<|endoftext|>"), rng)
    split = train_bpe(lines, split=True)
    d = os.path.join(out, "bpe_split")
    os.makedirs(d, exist_ok=True)
    split.save(os.path.join(d, "tokenizer.json"))
    result["bpe_split"] = golden(split, short_cases("<|endoftext|>"), rng)
    flag_cases = ["a <mask> b", "a<mask>b", "  <mask>  x", "xyzzy xyzzyx axyzzy xyzzy.", "<MASK> Hello World hello world",
                  "HELLO WORLD!", "<mask><mask>", "<|endoftext|> <mask>"]
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    add_flag_tokens(bpe)
    d = os.path.join(out, "bpe_flags")
    os.makedirs(d, exist_ok=True)
    bpe.save(os.path.join(d, "tokenizer.json"))
    result["bpe_flags"] = golden(bpe, flag_cases + short_cases("<|endoftext|>"), rng)

    for name, lowercase, strip in [("wordpiece_uncased", True, None), ("wordpiece_cased", False, False)]:
        wp = train_wordpiece(lines, lowercase, strip)
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        wp.save(os.path.join(d, "tokenizer.json"))
        wp.save_model(d)  # vocab.txt
        if not lowercase:
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                json.dump({"do_lower_case": False, "tokenizer_class": "BertTokenizer"}, f, indent=2)
        g = golden(wp, cases("[SEP]") + ["[CLS] a [SEP] b [MASK] c [PAD] [UNK]", "[sep] lower"], rng)
        # vocab.txt read the way ps_train reads it must give the same ids.
        again = BertWordPieceTokenizer(os.path.join(d, "vocab.txt"), lowercase=lowercase, strip_accents=strip)
        for e in g["encode"]:
            assert again.encode(e["text"], add_special_tokens=False).ids == e["ids"], e["text"]
        result[name] = g
        if lowercase:
            add_flag_tokens(wp._tokenizer)
            d = os.path.join(out, "wordpiece_flags")
            os.makedirs(d, exist_ok=True)
            wp.save(os.path.join(d, "tokenizer.json"))
            result["wordpiece_flags"] = golden(wp, flag_cases + short_cases("[SEP]"), rng)

    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(result, f, ensure_ascii=True, indent=None, separators=(",", ":"))
    total = sum(os.path.getsize(os.path.join(r, x)) for r, _, fs in os.walk(out) for x in fs)
    print(f"wrote {out} ({total / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
