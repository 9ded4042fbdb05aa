#!/usr/bin/env python3
"""Fixtures for the Qwen2 and Llama 3 tokenizers of data/family-tokenizers/ (made by
tools/make_family_tokenizers.py): HF tokenizers' ids of the test corpus (tests/data/tokenizer/
corpus.bin) plus corpus_family.bin (NFC cases, added tokens in text, contractions, CR/LF runs),
for each tokenizer variant, stored as a count and a hash per string to keep them small.

  python3 tools/make_family_fixtures.py [--tokenizers DIR]   # ~3 min; tokenizers 0.22.2

DIR holds the extracted tokenizers.tar.xz (default: build/family-tokenizers, which cmake
extracts at configure time). Formats (LEB128 varints "v"): corpus_family.bin as corpus.bin;
hash_<variant>.bin = magic "GTKH1\\n", v(count), count x (v(n ids), 4-byte little-endian low
half of the FNV-1a 64 hash of the ids as little-endian uint32), one per string of corpus.bin then
corpus_family.bin, in order.
"""
import argparse, os, random, struct, sys, unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(ROOT, "tests", "data", "tokenizer")
SEED = 20261201
VARIANTS = ["qwen2.5", "qwen3", "r1-distill-qwen", "llama3", "llama3.1", "r1-distill-llama"]
PLAIN = ["qwen3", "llama3.1"]  # also with special-token text kept as text


def v(x):
    out = bytearray()
    while True:
        b = x & 0x7F
        x >>= 7
        out.append(b | (0x80 if x else 0))
        if not x:
            return bytes(out)


def read_corpus(path):
    d = open(path, "rb").read()
    assert d[:6] == b"GTKC1\n"
    p = 6

    def rv():
        nonlocal p
        x, sh = 0, 0
        while True:
            b = d[p]
            p += 1
            x |= (b & 0x7F) << sh
            sh += 7
            if not b & 0x80:
                return x
    out = []
    for _ in range(rv()):
        n = rv()
        out.append(d[p:p + n].decode("utf-8"))
        p += n
    return out


def fnv(ids):
    h = 0xcbf29ce484222325
    for i in ids:
        for b in struct.pack("<I", i):
            h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def family_corpus(added):
    r = random.Random(SEED)
    out = []
    changed = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF
               and unicodedata.normalize("NFD", chr(cp)) != chr(cp)]
    hangul = [cp for cp in changed if 0xAC00 <= cp <= 0xD7A3]
    changed = [cp for cp in changed if cp not in set(hangul)] + r.sample(hangul, 300)
    for cp in changed:  # decomposed forms that NFC recomposes (or not: exclusions, singletons)
        d = unicodedata.normalize("NFD", chr(cp))
        out.append(d)
        out.append(r.choice(["x", " ", "the ", "1"]) + d + r.choice(["", " word", "\n", "!"]))
        out.append(chr(cp) + " " + d)
    marks = [chr(c) for c in list(range(0x300, 0x370)) + [0x591, 0x5B0, 0x5C4, 0x93C, 0x94D,
                                                          0x1AB0, 0x1DC0, 0x20D0, 0x302A, 0x3099]]
    bases = "aeiouAEIOUcnsyzgkhwxrlCNSYZ" + "αεηιουωΑΕΗ" + "аеиоуАЕИ" + "かきくさしすたつカキ"
    for _ in range(3000):
        s = []
        for _ in range(r.randint(1, 12)):
            s.append(r.choice(bases) + "".join(r.choice(marks) for _ in range(r.randint(0, 4))))
            if r.random() < 0.3:
                s.append(r.choice([" ", "  ", "\n", "'s", "123", "。"]))
        out.append("".join(s))
    for _ in range(800):  # Hangul jamo sequences (L V T compose to syllables)
        s = ""
        for _ in range(r.randint(1, 6)):
            s += chr(0x1100 + r.randrange(19)) + chr(0x1161 + r.randrange(21))
            if r.random() < 0.5:
                s += chr(0x11A8 + r.randrange(27))
            if r.random() < 0.2:
                s += " "
        out.append(s)
    toks = sorted(added)
    fillers = ["", " ", "\n", "x", "é", "e\u0301", "  ", "\n\n", "hello", "123", "<", ">", "|",
               "<|", "|>", "'s", "\t", "你好", "🙂"]
    for _ in range(4000):
        s = ""
        for _ in range(r.randint(1, 6)):
            s += r.choice(fillers)
            t = r.choice(toks)
            k = r.random()
            if k < 0.15:
                t = t[:r.randint(1, max(1, len(t) - 1))]
            elif k < 0.25:
                t = t.upper()
            s += t
        out.append(s + r.choice(fillers))
    words = ["don't", "DON'T", "He'LL", "I'M", "we'VE", "it's", "IT'S", "they'Re", "'d", "'S",
             "x'd", "o'clock", "rock'n'roll"]
    ws = [" ", "  ", "\t", "\n", "\r", "\r\n", "\n\r", "\u00a0", "\u3000", "\u2028", "\u200b",
          " \n", "\n ", "\r\n\r\n", "   \n\n  "]
    for _ in range(2500):
        s = ""
        for _ in range(r.randint(1, 10)):
            s += r.choice(words + ws + ["1234567", "3.14", "x²", "٣٤٥", "Ⅻ", "...", "?!",
                                        "#include", "fn(){", "}", "->", "''", "\"", "€100"])
        out.append(s)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizers", default=os.path.join(ROOT, "build", "family-tokenizers"))
    a = ap.parse_args()
    from tokenizers import Tokenizer
    tks = {n: Tokenizer.from_file(os.path.join(a.tokenizers, n, "tokenizer.json"))
           for n in VARIANTS}
    added = set()
    for t in tks.values():
        added.update(t.get_added_tokens_decoder()[i].content for i in t.get_added_tokens_decoder())
    added = {t for t in added if "reserved_special" not in t} | {"<|reserved_special_token_5|>"}
    corpus = read_corpus(os.path.join(DATA, "corpus.bin"))
    extra = family_corpus(added)
    with open(os.path.join(DATA, "corpus_family.bin"), "wb") as f:
        f.write(b"GTKC1\n" + v(len(extra)))
        for s in extra:
            b = s.encode("utf-8")
            f.write(v(len(b)) + b)
    texts = corpus + extra
    jobs = [(n, False) for n in VARIANTS] + [(n, True) for n in PLAIN]
    for name, plain in jobs:
        tk = tks[name]
        tk.encode_special_tokens = plain
        encs = tk.encode_batch(texts, add_special_tokens=False)
        tk.encode_special_tokens = False
        fn = "hash_%s%s.bin" % (name, "_plain" if plain else "")
        with open(os.path.join(DATA, fn), "wb") as f:
            f.write(b"GTKH1\n" + v(len(texts)))
            for i, e in enumerate(encs):
                f.write(v(len(e.ids)) + struct.pack("<I", fnv(e.ids) & 0xFFFFFFFF))
        print(fn, len(texts), "strings", sum(len(e.ids) for e in encs), "ids")


if __name__ == "__main__":
    main()
