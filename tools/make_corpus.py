#!/usr/bin/env python3
"""Writes the quick-start corpus: deterministic English-like text from a small grammar.

No download and no third-party text: the sentences come from word lists in this file,
so the corpus is ours to ship and identical on every machine (Python's `random` with a
fixed seed). Byte-level, it has real structure to learn: spelling, word order,
agreement between a subject's number and its verb, punctuation and paragraphs.

usage: tools/make_corpus.py OUT_DIR  -> OUT_DIR/train.txt (~2 MB), OUT_DIR/valid.txt
"""
import os
import random
import sys

NOUNS = ["river", "engineer", "garden", "machine", "city", "teacher", "storm", "library", "farmer",
         "window", "mountain", "child", "letter", "bridge", "captain", "forest", "market", "doctor",
         "lantern", "harbor", "student", "village", "painter", "clock", "island", "soldier", "kitchen"]


def plural_of(noun):
    if noun == "child":
        return "children"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


PLURAL = {n: plural_of(n) for n in NOUNS}
ADJECTIVES = ["quiet", "old", "bright", "small", "heavy", "careful", "green", "distant", "gentle",
              "broken", "busy", "golden", "narrow", "patient", "cold", "hidden", "proud", "simple"]
VERBS = [("watch", "watches", "watched"), ("carry", "carries", "carried"), ("build", "builds", "built"),
         ("find", "finds", "found"), ("follow", "follows", "followed"), ("open", "opens", "opened"),
         ("remember", "remembers", "remembered"), ("paint", "paints", "painted"),
         ("mend", "mends", "mended"), ("visit", "visits", "visited"), ("teach", "teaches", "taught")]
ADVERBS = ["slowly", "again", "every morning", "before dawn", "without a word", "in the rain",
           "after the war", "with great care", "once more", "at night"]
PLACES = ["near the river", "across the valley", "behind the market", "under the bridge",
          "in the old city", "beside the harbor", "on the island", "through the forest"]
CONNECTIVES = ["and then", "but", "because", "while", "so"]


def noun_phrase(rng, plural):
    noun = PLURAL[rng.choice(NOUNS)] if plural else rng.choice(NOUNS)
    det = rng.choice(["the", "some", "many"] if plural else ["the", "a", "one", "every"])
    if det == "a" and rng.random() < 0.5:
        adj = rng.choice(ADJECTIVES)
        det = "an" if adj[0] in "aeiou" else "a"
        return f"{det} {adj} {noun}"
    if rng.random() < 0.4:
        return f"{det} {rng.choice(ADJECTIVES)} {noun}"
    return f"{det} {noun}"


def clause(rng):
    plural = rng.random() < 0.4
    subject = noun_phrase(rng, plural)
    base, third, past = rng.choice(VERBS)
    tense = rng.random()
    verb = past if tense < 0.5 else (base if plural else third)
    parts = [subject, verb, noun_phrase(rng, rng.random() < 0.3)]
    if rng.random() < 0.5:
        parts.append(rng.choice(PLACES))
    if rng.random() < 0.3:
        parts.append(rng.choice(ADVERBS))
    return " ".join(parts)


def sentence(rng):
    s = clause(rng)
    if rng.random() < 0.35:
        s += f", {rng.choice(CONNECTIVES)} {clause(rng)}"
    return s[0].upper() + s[1:] + rng.choice([".", ".", ".", "!", "?"] if rng.random() < 0.1 else ["."])


def write(path, seed, target_bytes):
    rng = random.Random(seed)
    size = 0
    with open(path, "w") as f:
        while size < target_bytes:
            para = " ".join(sentence(rng) for _ in range(rng.randint(3, 7))) + "\n\n"
            f.write(para)
            size += len(para)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "train.txt"), 1, 2_000_000)
    write(os.path.join(out, "valid.txt"), 2, 100_000)
    print(f"wrote {out}/train.txt and {out}/valid.txt")


if __name__ == "__main__":
    main()
