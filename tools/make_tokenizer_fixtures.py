#!/usr/bin/env python3
"""Oracle fixtures for the C tokenizer, made with HF `tokenizers` and `jinja2`.

    python3 tools/make_tokenizer_fixtures.py [--shared data/deepseek-v3-tokenizer]

Writes tests/data/tokenizer/:
  corpus.bin          the test corpus: >= 20,000 strings generated with a fixed seed
  encode_v3.bin       HF ids of every corpus string with the DeepSeek-V3 tokenizer.json
  encode_v3_plain.bin ids with encode_special_tokens=True (special-token text kept as text)
  encode_r1.bin       ids with the R1 variant (128798/128799 = <think>/</think>) for strings
                      mentioning think tags and placeholders
  decode_v3.bin       random id sequences and HF decode() of them (lossy UTF-8), some with
                      skip_special_tokens
  small/tokenizer.json, encode_small.bin, encode_small_prefix.bin
                      a byte-level BPE trained here with HF (lone ByteLevel pre-tokenizer with the
                      GPT-2 regex, merges as pairs, added tokens with lstrip/rstrip) and its ids;
                      the _prefix variant loads it with add_prefix_space=true
  chat_cases.json     conversations rendered by jinja2 with the real V3 template (from
                      tokenizer_config.json) and DeepSeek-R1's template, plus HF ids
  malformed/*.json    broken tokenizer files and the error class they must produce
and rollout/tokenizer/unicode_extra.h: the code points HF's regex engine (Oniguruma, newer Unicode)
puts in \\p{L}, \\p{M}, \\p{N}, \\p{P}, \\p{S} but Python's unicodedata (the Unicode version of
Debian 12's PCRE2) does not, and Oniguruma's \\s set, both read from HF itself.

Binary format (little-endian LEB128 varints, "v"): corpus.bin = magic "GTKC1\\n", v(count),
count x (v(len), bytes). encode_*.bin = magic "GTKE1\\n", v(count), count x (v(index into
corpus or the file's own texts), v(n), n x v(id)). encode_r1.bin carries its own
texts: magic "GTKT1\\n", v(count), count x (v(len), bytes, v(n), n x v(id)). decode_v3.bin =
magic "GTKD1\\n", v(count), count x (v(skip_special), v(n), n x v(id), v(len), bytes).
"""
import argparse
import json
import os
import random
import sys
import unicodedata

from tokenizers import Tokenizer

SEED = 20261130
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "tests", "data", "tokenizer")


def v(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


# ---------------------------------------------------------------------------------------------
# corpus

WORDS = """the of and to in is was that for on with as by at from his her they this which be
have had not are but were an it or their one all there been has when who will more would no if
out so said what up its about into than them can only other new some could time these two may
then do first any my now such like our over man me even most made after also did many before
must through back years where much your way well down should because each just those people
how too little state good very make world still own see men work long get here between both life
being under never day same another know while last might us great old year off come since against
go came right used take three states himself few house use during without again place american
around however home small found thought went say part once general high upon school every don't
does got united left number course war until always away something fact though water less public
put think almost hand enough far took head yet government system better set told nothing night
end why called didn't eyes find going look asked later knew point next city give group toward
young let room side social present given several order national possible rather second face per
among form important often things looked early white case large become big need four within felt
children along saw best church ever least power development light thing seemed family interest
want members mind country area others done turned although open god service problem certain kind
different thus began door help means sense whole matter perhaps itself york times law human line
above name example action company hands local show whether five history gave today either act
feet across taken past quite anything seen having death week experience body word half really
field am car words already themselves i'm information tell together college shall money period
held keep sure real probably free seems political cannot behind miss question air office making
brought whose special heard major problems ago became federal moment study available known result
street economic boy position reason change south board individual job areas society west close
turn love community true court force full seem am i'd we're they've you'll she'd it's isn't
quantum neural gradient tokenizer benchmark throughput latency reinforcement reward policy
""".split()

NAMES = ["Alice", "Bob", "Zoë", "Søren", "François", "Łukasz", "José", "Müller", "O'Brien",
         "McDonald", "van der Berg", "Ólafur", "Nguyễn", "Dvořák", "Ærøskøbing", "İstanbul"]


def prose(r):
    out = []
    for _ in range(r.randint(1, 3)):
        words = [r.choice(WORDS) for _ in range(r.randint(3, 22))]
        if r.random() < 0.3:
            words.insert(r.randrange(len(words)), r.choice(NAMES))
        if r.random() < 0.2:
            words.insert(r.randrange(len(words)), str(r.randint(0, 10 ** r.randint(1, 9))))
        s = " ".join(words)
        s = s[0].upper() + s[1:]
        s += r.choice([".", "!", "?", "...", ";", ":", " —", "…", "?!", '."', ".'", ")"])
        if r.random() < 0.15:
            s = '"' + s + '"'
        out.append(s)
    sep = r.choice([" ", "  ", "\n", "\n\n", " \n", "\r\n", "\t"])
    return sep.join(out)


def ident(r):
    base = r.choice(["x", "y", "i", "n", "buf", "count", "value", "result", "node", "tmp",
                     "self", "ctx", "data", "len", "err", "item", "key", "_private", "__init__",
                     "MAX_SIZE", "getValue", "HTTPServer", "parse_json", "αβ", "変数"])
    if r.random() < 0.3:
        base += str(r.randint(0, 99))
    return base


def code(r):
    i, j, k = ident(r), ident(r), ident(r)
    n = r.randint(0, 10000)
    ind = r.choice(["    ", "  ", "\t", "        "])
    snippets = [
        f"def {i}({j}, {k}=None):\n{ind}if {j} is None:\n{ind}{ind}return []\n{ind}return [{k} * 2 for {k} in range({n})]\n",
        f"int {i}(const char *{j}, size_t {k}) {{\n{ind}for (size_t q = 0; q < {k}; q++)\n{ind}{ind}if ({j}[q] == '\\n') return -1;\n{ind}return {n};\n}}\n",
        f"const {i} = async ({j}) => {{\n{ind}const res = await fetch(`/api/${{{j}}}?n={n}`);\n{ind}return res.json();\n}};\n",
        f"fn {i}<'a>({j}: &'a str) -> Result<Vec<u8>, Box<dyn Error>> {{\n{ind}let v: Vec<u8> = {j}.bytes().collect();\n{ind}Ok(v)\n}}\n",
        f"func {i}({j} []int) (int, error) {{\n{ind}if len({j}) == 0 {{\n{ind}{ind}return 0, errors.New(\"empty\")\n{ind}}}\n{ind}return {j}[0] + {n}, nil\n}}\n",
        f"public static void {i}(String[] {j}) throws IOException {{\n{ind}System.out.println(\"{k}=\" + {n});\n}}\n",
        f"SELECT {i}, COUNT(*) AS {j} FROM {k} WHERE id >= {n} GROUP BY {i} ORDER BY {j} DESC;\n",
        f"<div class=\"{i}\" id='{j}'>\n{ind}<a href=\"https://example.com/{k}?q={n}&amp;x=1\">link</a>\n</div>\n",
        f"#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do\n{ind}grep -n \"{i}\" \"$f\" | awk '{{print $1}}' >> /tmp/{j}.log\ndone\n",
        f"{{\"{i}\": [{n}, {n / 7:.5f}, true, null], \"{j}\": {{\"{k}\": \"\\u00e9\\n\"}}}}",
        f"    # {r.choice(WORDS)} {r.choice(WORDS)}\n    {i} += {j}**2 // {n} % 3 != 0 and not {k}\n",
        f"x <- c({n}, {n + 1}); {i} <- function({j}) {{ {j} %>% filter({k} > 0) }}\n",
        f"@decorator\nclass {i.capitalize()}({j.capitalize()}):\n{ind}\"\"\"{r.choice(WORDS)}.\"\"\"\n{ind}pass\n",
        f"mov eax, {n}\n\tpush rbp\n\tcall _{i}\n; {r.choice(WORDS)}\n",
    ]
    return "".join(r.choice(snippets) for _ in range(r.randint(1, 3)))


def latex(r):
    g = ["\\alpha", "\\beta", "\\gamma", "\\Delta", "\\pi", "\\theta", "\\lambda", "\\sigma",
         "\\omega", "\\infty", "\\partial", "\\nabla", "x", "y", "n", "k"]
    parts = [
        "\\frac{%s}{%s}" % (r.choice(g), r.randint(1, 99)),
        "\\sum_{i=1}^{%d} %s_i^2" % (r.randint(2, 100), r.choice(g)),
        "\\int_0^{\\infty} e^{-%s x}\\,dx" % r.choice(g),
        "\\sqrt{%d}" % r.randint(2, 1000),
        "\\begin{pmatrix} 1 & 0 \\\\ 0 & 1 \\end{pmatrix}",
        "\\lim_{n \\to \\infty} \\left(1 + \\frac{1}{n}\\right)^n = e",
        "\\boxed{%d}" % r.randint(-1000, 100000),
        "\\mathbb{R}^{%d}" % r.randint(1, 9),
        "a^2 + b^2 = c^2",
        "\\binom{%d}{%d}" % (r.randint(5, 50), r.randint(0, 5)),
        "f'(x) = \\lim_{h\\to 0}\\frac{f(x+h)-f(x)}{h}",
        "∀ε>0 ∃δ>0: |x−a|<δ ⇒ |f(x)−f(a)|<ε",
        "x ≤ y ≥ z ≠ w ≈ ∑ ∏ √ ∞ ∫ ∂ ∇ ∈ ∉ ⊂ ∪ ∩",
    ]
    s = " ".join(r.choice(parts) for _ in range(r.randint(1, 5)))
    return r.choice(["$%s$", "$$%s$$", "\\[%s\\]", "\\(%s\\)", "Solve %s for x."]) % s


def rand_range(r, lo, hi, n):
    return "".join(chr(r.randint(lo, hi)) for _ in range(n))


def cjk(r):
    pieces = []
    for _ in range(r.randint(1, 8)):
        kind = r.randrange(7)
        if kind == 0:
            pieces.append(rand_range(r, 0x4E00, 0x9FA5, r.randint(1, 20)))
        elif kind == 1:
            pieces.append(rand_range(r, 0x9FA6, 0x9FFF, r.randint(1, 4)))  # outside the class
        elif kind == 2:
            pieces.append(rand_range(r, 0x3400, 0x4DBF, r.randint(1, 4)))
        elif kind == 3:
            pieces.append(rand_range(r, 0xAC00, 0xD7A3, r.randint(1, 10)))  # Hangul
        elif kind == 4:
            pieces.append(r.choice(["，", "。", "！", "？", "、", "「", "」", "《", "》", "：", "；",
                                    "（", "）", "…", "—", "\u3000"]))
        elif kind == 5:
            pieces.append(rand_range(r, 0xFF01, 0xFF5E, r.randint(1, 6)))  # fullwidth
        else:
            pieces.append(rand_range(r, 0x20000, 0x2A6DF, r.randint(1, 3)))  # ext B
        if r.random() < 0.3:
            pieces.append(r.choice([" ", "abc", "123", "\n", "GPU", "2024年"]))
    return "".join(pieces)


def kana(r):
    out = []
    for _ in range(r.randint(1, 8)):
        kind = r.randrange(5)
        if kind == 0:
            out.append(rand_range(r, 0x3041, 0x3096, r.randint(1, 10)))
        elif kind == 1:
            out.append(rand_range(r, 0x30A1, 0x30FA, r.randint(1, 10)))
        elif kind == 2:
            out.append(rand_range(r, 0xFF66, 0xFF9D, r.randint(1, 6)))  # half-width
        elif kind == 3:
            out.append(rand_range(r, 0x4E00, 0x9FA5, r.randint(1, 4)))
        else:
            out.append(r.choice(["ー", "・", "々", "〜", "っ", "ゃ", "ゔ", "゛", "゜", "ヽ", "ゞ"]))
    return "".join(out)


def scripts(r):
    ranges = [(0x0600, 0x06FF), (0x0750, 0x077F), (0x0590, 0x05FF), (0x0900, 0x097F),
              (0x0980, 0x09FF), (0x0B80, 0x0BFF), (0x0E00, 0x0E7F), (0x0400, 0x04FF),
              (0x0370, 0x03FF), (0x10A0, 0x10FF), (0x0530, 0x058F), (0x1200, 0x137F),
              (0x0D00, 0x0D7F), (0x1780, 0x17FF), (0x1800, 0x18AF)]
    fixed = ["مرحبا بالعالم", "السَّلَامُ عَلَيْكُمْ", "नमस्ते दुनिया", "हिन्दी में लिखा गया पाठ",
             "Привет, мир!", "Γειά σου Κόσμε", "שָׁלוֹם עוֹלָם", "สวัสดีชาวโลก", "გამარჯობა",
             "안녕하세요 세계", "Xin chào thế giới", "Dzień dobry, świecie", "১২৩ বাংলা", "தமிழ்"]
    out = []
    for _ in range(r.randint(1, 6)):
        if r.random() < 0.5:
            out.append(r.choice(fixed))
        else:
            lo, hi = r.choice(ranges)
            out.append(rand_range(r, lo, hi, r.randint(1, 15)))
        out.append(r.choice([" ", "", ", ", "\n", " 42 ", "."]))
    return "".join(out)


EMOJI = ["😀", "😂", "🥲", "🤖", "🚀", "🔥", "👍", "👍🏽", "👍🏿", "❤️", "❤", "✨", "🇺🇸", "🇯🇵",
         "🇩🇪", "🏳️‍🌈", "👨‍👩‍👧‍👦", "👩‍💻", "🧑🏾‍🚀", "👁️‍🗨️", "1️⃣", "#️⃣", "©️", "™", "🫠", "🪿",
         "🧬", "☕", "⚡", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "🙇‍♀️", "🤷🏻‍♂️"]


def emoji(r):
    out = []
    for _ in range(r.randint(1, 10)):
        x = r.random()
        if x < 0.6:
            out.append(r.choice(EMOJI))
        elif x < 0.8:
            out.append(chr(r.randint(0x1F300, 0x1FAFF)))
        else:
            out.append(r.choice([" ", "ok", "\u200d", "\ufe0f", "!", "\n"]))
    return "".join(out)


def combining(r):
    out = []
    for _ in range(r.randint(1, 12)):
        out.append(r.choice("aeiouAEIOUnczxq "))
        for _ in range(r.choice([0, 1, 1, 2, 3, 8])):
            out.append(chr(r.randint(0x0300, 0x036F)))
        if r.random() < 0.1:
            out.append(unicodedata.normalize("NFD", r.choice(["é", "ñ", "ö", "Å", "ệ", "ǘ"])))
    return "".join(out)


WS = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", "\x0b", "\x0c", "\u00a0",
      "\u3000", "\u2002", "\u2003", "\u2009", "\u200a", "\u180e", "\u200b", "\u2028", "\u2029",
      "\u0085", "\u202f", "\u205f", "\u1680", "\x1c", "\x1d", "\x1e", "\x1f", " \n ", "\t \n",
      "        ", "\n    "]


def whitespace(r):
    out = []
    for _ in range(r.randint(1, 12)):
        out.append("".join(r.choice(WS) for _ in range(r.randint(1, 5))))
        if r.random() < 0.6:
            out.append(r.choice(WORDS + ["x", "1", "!", "中文", "()", "—"]))
    return "".join(out)


def digits(r):
    kind = r.randrange(8)
    if kind == 0:
        return "".join(r.choice("0123456789") for _ in range(r.randint(1, 300)))
    if kind == 1:
        return f"{r.randint(0, 10**12):,}.{r.randint(0, 999)}"
    if kind == 2:
        return "".join(r.choice(["abc", "x", "_", "-", "."]) + str(r.randint(0, 10 ** 7))
                       for _ in range(r.randint(1, 6)))
    if kind == 3:
        return "".join(chr(r.choice([0x0660, 0x06F0, 0x0966, 0xFF10, 0x09E6]) + r.randint(0, 9))
                       for _ in range(r.randint(1, 20)))
    if kind == 4:
        return "".join(r.choice("²³¹¼½¾ⅠⅡⅢⅣⅫ①②⑳⁰⁴₀₁₂") for _ in range(r.randint(1, 10)))
    if kind == 5:
        return f"{r.random() * 10 ** r.randint(-5, 20):.{r.randint(0, 12)}e}"
    if kind == 6:
        return "+1 (%03d) %03d-%04d" % (r.randint(0, 999), r.randint(0, 999), r.randint(0, 9999))
    return "%d-%02d-%02dT%02d:%02d:%02dZ" % (r.randint(1900, 2100), r.randint(1, 12),
                                             r.randint(1, 28), r.randint(0, 23),
                                             r.randint(0, 59), r.randint(0, 59))


def random_bytes(r):
    b = bytes(r.getrandbits(8) for _ in range(r.randint(1, 120)))
    return b.decode("utf-8", errors="replace")


def random_codepoints(r):
    out = []
    for _ in range(r.randint(1, 30)):
        x = r.random()
        if x < 0.5:
            cp = r.randint(0x20, 0xFFFF)
        elif x < 0.8:
            cp = r.randint(0x20, 0x2FFF)
        else:
            cp = r.randint(0x10000, 0x10FFFF)
        if 0xD800 <= cp <= 0xDFFF:
            cp = 0xFFFD
        out.append(chr(cp))
    return "".join(out)


def ascii_soup(r):
    return "".join(chr(r.randint(0, 127)) for _ in range(r.randint(1, 80)))


def with_specials(r, specials, base):
    s = base(r)
    for _ in range(r.randint(1, 5)):
        tokn = r.choice(specials)
        x = r.random()
        if x < 0.15:
            tokn = tokn[: r.randint(1, max(1, len(tokn) - 1))]  # a truncated token: plain text
        elif x < 0.3:
            tokn = r.choice([" ", "  ", "\n", "\t"]) + tokn + r.choice([" ", "\n", ""])
        elif x < 0.4:
            tokn = tokn + tokn
        p = r.randint(0, len(s))
        s = s[:p] + tokn + s[p:]
    return s


def long_line(r):
    kind = r.randrange(7)
    n = r.randint(3000, 25000)
    if kind == 0:
        return " ".join(r.choice(WORDS) for _ in range(n // 5))
    if kind == 1:
        return "a" * n
    if kind == 2:
        return " " * n + "x"
    if kind == 3:
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
        return "".join(r.choice(alphabet) for _ in range(n))
    if kind == 4:
        return "".join(r.choice("0123456789") for _ in range(n))
    if kind == 5:
        return rand_range(r, 0x4E00, 0x9FA5, n // 3)
    return "".join(r.choice(["ab", "cd", "ef", "-", "_"]) for _ in range(n // 2))


# strings for the lstrip/rstrip/non-special tokens of the small tokenizer (part of the corpus)
SMALL_EXTRA = ["x <mask> y", "x<mask>y", "a  <mask>  b", "[SEP]  next", "[SEP]\n\nz",
             "foo bar baz", "foo  bar", "café é", "<think> a </think>  b", "a</think>b",
             "  <mask>", "<mask>", "[SEP]", " </think> ", "\u3000<mask>\u3000x"]


def build_corpus(specials):
    r = random.Random(SEED)
    gens = [(prose, 2600), (code, 1800), (latex, 1200), (cjk, 1500), (kana, 1000),
            (scripts, 1500), (emoji, 1000), (combining, 800), (whitespace, 1500),
            (digits, 1500), (random_bytes, 1200), (random_codepoints, 1200), (ascii_soup, 900)]
    corpus = ["", " ", "\n", "a", "<｜User｜>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>x"]
    corpus += [chr(c) for c in range(1, 128)] + SMALL_EXTRA
    for g, n in gens:
        corpus += [g(r) for _ in range(n)]
    mixers = [prose, code, cjk, emoji, whitespace, digits, scripts]
    for _ in range(1300):  # mixed scripts
        corpus.append("".join(r.choice(mixers)(r) for _ in range(r.randint(2, 3))))
    for _ in range(1200):  # special tokens inside text
        corpus.append(with_specials(r, specials, r.choice(mixers)))
    for _ in range(7):
        corpus.append(long_line(r))
    return corpus


# ---------------------------------------------------------------------------------------------
# writers


def write_corpus(path, corpus):
    with open(path, "wb") as f:
        f.write(b"GTKC1\n" + v(len(corpus)))
        for s in corpus:
            b = s.encode("utf-8")
            f.write(v(len(b)) + b)


def write_encodings(path, items):
    with open(path, "wb") as f:
        f.write(b"GTKE1\n" + v(len(items)))
        for idx, ids in items:
            f.write(v(idx) + v(len(ids)) + b"".join(v(i) for i in ids))


def write_texts(path, items):
    with open(path, "wb") as f:
        f.write(b"GTKT1\n" + v(len(items)))
        for s, ids in items:
            b = s.encode("utf-8")
            f.write(v(len(b)) + b + v(len(ids)) + b"".join(v(i) for i in ids))


def write_decodes(path, items):
    with open(path, "wb") as f:
        f.write(b"GTKD1\n" + v(len(items)))
        for skip, ids, text in items:
            b = text.encode("utf-8")
            f.write(v(skip) + v(len(ids)) + b"".join(v(i) for i in ids) + v(len(b)) + b)


# ---------------------------------------------------------------------------------------------
# tokenizers


def r1_json(v3_text):
    j = json.loads(v3_text)
    for a in j["added_tokens"]:
        if a["id"] in (128798, 128799):
            a["content"] = "<think>" if a["id"] == 128798 else "</think>"
            a["special"] = False
            a["normalized"] = True
    return json.dumps(j, ensure_ascii=False)


def train_small(corpus, out_dir):
    from tokenizers import models, pre_tokenizers, decoders, trainers, AddedToken
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"])
    r = random.Random(SEED + 1)
    sample = [s for s in corpus if len(s) < 3000]
    r.shuffle(sample)
    tok.train_from_iterator(sample[:6000], trainer=trainer)
    tok.add_special_tokens([AddedToken("<｜User｜>", special=True, normalized=False),
                            AddedToken("<｜Assistant｜>", special=True, normalized=False),
                            AddedToken("<mask>", special=True, lstrip=True, normalized=False),
                            AddedToken("[SEP]", special=True, rstrip=True, normalized=False),
                            AddedToken("<think>", special=False),
                            AddedToken("</think>", special=False, lstrip=True, rstrip=True)])
    tok.add_tokens([AddedToken("foo bar", special=False), AddedToken("é", special=False)])
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "tokenizer.json")
    tok.save(path)
    return path


# ---------------------------------------------------------------------------------------------
# chat

R1_TEMPLATE = (
    # DeepSeek-R1's tokenizer_config.json chat_template, with the generation prompt of its
    # 2025 update ("<｜Assistant｜><think>\n").
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='', is_first_sp=true) %}"
    "{%- for message in messages %}{%- if message['role'] == 'system' %}{%- if ns.is_first_sp %}"
    "{% set ns.system_prompt = ns.system_prompt + message['content'] %}{% set ns.is_first_sp = false %}"
    "{%- else %}{% set ns.system_prompt = ns.system_prompt + '\\n\\n' + message['content'] %}{%- endif %}"
    "{%- endif %}{%- endfor %}{{ bos_token }}{{ ns.system_prompt }}{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}"
    "{%- if message['role'] == 'assistant' and 'tool_calls' in message %}{%- set ns.is_tool = false -%}"
    "{%- for tool in message['tool_calls'] %}{%- if not ns.is_first %}{%- if message['content'] is none %}"
    "{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}"
    "{%- else %}{{'<｜Assistant｜>' + message['content'] + '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}"
    "{%- endif %}{%- set ns.is_first = true -%}{%- else %}"
    "{{'\\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}"
    "{%- endif %}{%- endfor %}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}"
    "{%- if message['role'] == 'assistant' and 'tool_calls' not in message %}{%- if ns.is_tool %}"
    "{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}"
    "{%- else %}{% set content = message['content'] %}{% if '</think>' in content %}"
    "{% set content = content.split('</think>')[-1] %}{% endif %}"
    "{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}"
    "{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}"
    "{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}"
    "{%- set ns.is_output_first = false %}{%- else %}"
    "{{'<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}"
    "{%- endfor -%}{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}"
    "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\\n'}}{% endif %}"
)


def conversations():
    r = random.Random(SEED + 2)
    call = lambda name, args: {"type": "function",
                               "function": {"name": name, "arguments": json.dumps(args)}}
    convs = [
        [{"role": "user", "content": "What is 2+2?"}],
        [{"role": "system", "content": "You are a helpful assistant."},
         {"role": "user", "content": "Hi"}],
        [{"role": "system", "content": "Be brief."}, {"role": "system", "content": "Use LaTeX."},
         {"role": "user", "content": "Integrate x^2."}],
        [{"role": "user", "content": "Hi there."},
         {"role": "assistant", "content": "<think>The user said hi.</think>Hello! How can I help?"},
         {"role": "user", "content": "Tell me a joke."}],
        [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
         {"role": "user", "content": "c"}, {"role": "assistant", "content": "d</think>e</think>f"},
         {"role": "user", "content": "g"}],
        [{"role": "user", "content": ""}],
        [{"role": "user", "content": "Solve $x^2-5x+6=0$. Put the answer in \\boxed{}."}],
        [{"role": "user", "content": "多少是 1+1？请用中文回答。"},
         {"role": "assistant", "content": "<think>\n简单。\n</think>\n\n答案是 2。"},
         {"role": "user", "content": "谢谢 🙏"}],
        [{"role": "user", "content": "text with <｜end▁of▁sentence｜> inside and <｜User｜> too"}],
        [{"role": "user", "content": "  leading and trailing spaces  \n"},
         {"role": "assistant", "content": "\n\nok\n\n"}],
        [{"role": "user", "content": "What's the weather in Paris?"},
         {"role": "assistant", "content": None,
          "tool_calls": [call("get_weather", {"city": "Paris"})]},
         {"role": "tool", "content": "{\"temp\": 21}"},
         {"role": "assistant", "content": "It is 21 degrees."}],
        [{"role": "user", "content": "Two lookups"},
         {"role": "assistant", "content": None,
          "tool_calls": [call("a", {"x": 1}), call("b", {"y": [1, 2]})]},
         {"role": "tool", "content": "1"}, {"role": "tool", "content": "2"}],
        [{"role": "user", "content": "ends in a tool output"},
         {"role": "assistant", "content": None, "tool_calls": [call("f", {})]},
         {"role": "tool", "content": "done"}],
        [{"role": "system", "content": "sys"}, {"role": "user", "content": "q1"},
         {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"},
         {"role": "assistant", "content": "a2"}],
        [{"role": "user", "content": "only assistant prefix"},
         {"role": "assistant", "content": "partial"}],
    ]
    for _ in range(25):
        conv = []
        if r.random() < 0.5:
            conv.append({"role": "system", "content": prose(r)})
        for t in range(r.randint(1, 4)):
            conv.append({"role": "user", "content": r.choice([prose, code, latex, cjk, emoji])(r)})
            if t < 3 and r.random() < 0.7:
                body = prose(r)
                if r.random() < 0.5:
                    body = "<think>\n" + prose(r) + "\n</think>\n\n" + body
                conv.append({"role": "assistant", "content": body})
        if conv[-1]["role"] == "assistant":
            conv.append({"role": "user", "content": "And then?"})
        convs.append(conv)
    return convs


def render(template_text, messages, add_gen, bos):
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    return env.from_string(template_text).render(messages=messages,
                                                 add_generation_prompt=add_gen, bos_token=bos,
                                                 eos_token="<｜end▁of▁sentence｜>")


# ---------------------------------------------------------------------------------------------
# malformed files

def malformed(v3_text, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    j = json.loads(v3_text)
    small = {"version": "1.0", "added_tokens": j["added_tokens"][:3],
             "normalizer": None, "pre_tokenizer": j["pre_tokenizer"], "decoder": j["decoder"],
             "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "<｜begin▁of▁sentence｜>": 3},
                       "merges": ["a b"]}}
    def mk(name, obj_or_text, expect):
        text = obj_or_text if isinstance(obj_or_text, str) else json.dumps(obj_or_text,
                                                                           ensure_ascii=False)
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            f.write(text)
        return {"file": name, "expect": expect}
    cases = []
    good = json.dumps(small, ensure_ascii=False)
    cases.append(mk("truncated.json", good[: len(good) // 2], "EFORMAT"))
    cases.append(mk("empty.json", "", "EFORMAT"))
    cases.append(mk("not_object.json", "[1, 2, 3]", "EFORMAT"))
    d = json.loads(good); del d["model"]
    cases.append(mk("missing_model.json", d, "EFORMAT"))
    d = json.loads(good); d["model"]["vocab"] = ["a", "b"]
    cases.append(mk("vocab_list.json", d, "EFORMAT"))
    d = json.loads(good); d["model"]["vocab"]["a"] = "zero"
    cases.append(mk("vocab_id_string.json", d, "EFORMAT"))
    d = json.loads(good); d["model"]["merges"] = "a b"
    cases.append(mk("merges_string.json", d, "EFORMAT"))
    d = json.loads(good); d["model"]["merges"] = ["a c"]
    cases.append(mk("merge_unknown.json", d, "EFORMAT"))
    d = json.loads(good); d["model"]["merges"] = [["a"]]
    cases.append(mk("merge_pair_short.json", d, "EFORMAT"))
    d = json.loads(good); d["added_tokens"][0]["id"] = "0"
    cases.append(mk("added_id_string.json", d, "EFORMAT"))
    d = json.loads(good); del d["added_tokens"][1]["content"]
    cases.append(mk("added_no_content.json", d, "EFORMAT"))
    d = json.loads(good); d["model"]["type"] = "WordPiece"
    cases.append(mk("wordpiece.json", d, "EUNSUPPORTED"))
    d = json.loads(good); d["normalizer"] = {"type": "NFKC"}
    cases.append(mk("nfkc.json", d, "EUNSUPPORTED"))
    d = json.loads(good); d["pre_tokenizer"] = {"type": "Whitespace"}
    cases.append(mk("whitespace_pretok.json", d, "EUNSUPPORTED"))
    d = json.loads(good); d["pre_tokenizer"] = None
    cases.append(mk("no_pretok.json", d, "EUNSUPPORTED"))
    d = json.loads(good); d["decoder"] = {"type": "WordPiece"}
    cases.append(mk("decoder_wordpiece.json", d, "EUNSUPPORTED"))
    d = json.loads(good); d["model"]["dropout"] = 0.1
    cases.append(mk("dropout.json", d, "EUNSUPPORTED"))
    d = json.loads(good)
    d["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": "(?<name"}
    cases.append(mk("bad_regex.json", d, "EUNSUPPORTED"))
    d = json.loads(good); d["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Contiguous"
    cases.append(mk("split_contiguous.json", d, "EUNSUPPORTED"))
    d = json.loads(good); d["added_tokens"][0]["single_word"] = True
    cases.append(mk("single_word.json", d, "EUNSUPPORTED"))
    cases.append(mk("good.json", small, "OK"))
    with open(os.path.join(out_dir, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)


def ranges(cps):
    out, cps = [], sorted(cps)
    i = 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        out.append((cps[i], cps[j]))
        i = j + 1
    return out


def pcre_class(rs):
    return "".join("\\x{%X}" % a if a == b else "\\x{%X}-\\x{%X}" % (a, b) for a, b in rs)


def unicode_tables(path):
    """Asks HF's regex engine which code points each class holds (Split with behavior "removed"
    on a string of every code point drops exactly the members)."""
    from tokenizers import pre_tokenizers, Regex
    cps = [c for c in range(0x110000) if not (0xD800 <= c <= 0xDFFF)]
    allchars = "".join(map(chr, cps))

    def members(pattern):
        kept = pre_tokenizers.Split(Regex(pattern), behavior="removed").pre_tokenize_str(allchars)
        keep = bytearray(len(cps))
        for _, (a, b) in kept:
            keep[a:b] = b"\x01" * (b - a)
        return set(cps[i] for i in range(len(cps)) if not keep[i])

    lines = ["/* Generated by tools/make_tokenizer_fixtures.py from HF tokenizers " +
             __import__("tokenizers").__version__ + " and Python " +
             unicodedata.unidata_version + " Unicode data. Do not edit. */",
             "#ifndef GRPO_TOK_UNICODE_EXTRA_H", "#define GRPO_TOK_UNICODE_EXTRA_H", ""]
    for cat in "LMNPS":
        onig = members("\\p{%s}" % cat)
        py = set(c for c in cps if unicodedata.category(chr(c))[0] == cat)
        if py - onig:
            print(f"warning: {len(py - onig)} code points in \\p{{{cat}}} here but not in HF",
                  file=sys.stderr)
        lines.append("#define TOK_EXTRA_%s \"%s\" /* %d code points */" %
                     (cat, pcre_class(ranges(onig - py)).replace("\\", "\\\\"), len(onig - py)))
    ws = members("\\s")
    lines.append("#define TOK_WHITESPACE \"%s\"" % pcre_class(ranges(ws)).replace("\\", "\\\\"))
    lines += ["", "#endif", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", default=os.path.join(ROOT, "data", "deepseek-v3-tokenizer"))
    args = ap.parse_args()
    v3_path = os.path.join(args.shared, "tokenizer.json")
    v3_text = open(v3_path, encoding="utf-8").read()
    cfg = json.load(open(os.path.join(args.shared, "tokenizer_config.json"), encoding="utf-8"))
    os.makedirs(OUT, exist_ok=True)

    v3 = Tokenizer.from_str(v3_text)
    specials = [a["content"] for a in json.loads(v3_text)["added_tokens"]]
    corpus = build_corpus(specials)
    write_corpus(os.path.join(OUT, "corpus.bin"), corpus)
    encs = v3.encode_batch(corpus, add_special_tokens=False)
    write_encodings(os.path.join(OUT, "encode_v3.bin"), [(i, e.ids) for i, e in enumerate(encs)])
    ntok = sum(len(e.ids) for e in encs)

    v3.encode_special_tokens = True
    plain_idx = [i for i, s in enumerate(corpus) if "<｜" in s or "<|" in s]
    plain = v3.encode_batch([corpus[i] for i in plain_idx], add_special_tokens=False)
    write_encodings(os.path.join(OUT, "encode_v3_plain.bin"),
                    [(i, e.ids) for i, e in zip(plain_idx, plain)])
    v3.encode_special_tokens = False

    r1 = Tokenizer.from_str(r1_json(v3_text))
    rr = random.Random(SEED + 3)
    r1_texts = []
    for _ in range(400):
        s = prose(rr)
        for _ in range(rr.randint(1, 4)):
            t = rr.choice(["<think>", "</think>", "<think>\n", "\n</think>\n\n", " <think> ",
                           "<｜place▁holder▁no▁798｜>", "<｜place▁holder▁no▁799｜>",
                           "<｜place▁holder▁no▁797｜>", "<thin", "</think", "<｜Assistant｜><think>\n"])
            p = rr.randint(0, len(s))
            s = s[:p] + t + s[p:]
        r1_texts.append(s)
    write_texts(os.path.join(OUT, "encode_r1.bin"),
                [(s, r1.encode(s, add_special_tokens=False).ids) for s in r1_texts])

    # decode: random id sequences (partial UTF-8 sequences included), HF's lossy decode
    rd = random.Random(SEED + 4)
    vocab = v3.get_vocab_size(with_added_tokens=True)
    decs = []
    for i in range(2000):
        if i % 3 == 0:
            ids = encs[rd.randrange(len(encs))].ids
            if ids:
                a = rd.randrange(len(ids))
                ids = ids[a:a + rd.randint(1, 40)]
        else:
            ids = [rd.randrange(vocab) if rd.random() < 0.97 else rd.choice([0, 1, 128803, 128804])
                   for _ in range(rd.randint(0, 30))]
        skip = i % 2
        decs.append((skip, ids, v3.decode(ids, skip_special_tokens=bool(skip))))
    write_decodes(os.path.join(OUT, "decode_v3.bin"), decs)

    # a small trained byte-level BPE (lone ByteLevel pre-tokenizer)
    small_path = train_small(corpus, os.path.join(OUT, "small"))
    small_text = open(small_path, encoding="utf-8").read()
    small = Tokenizer.from_str(small_text)
    rs = random.Random(SEED + 5)
    short = [i for i, s in enumerate(corpus) if len(s) < 2000]
    sample = [corpus.index(x) for x in SMALL_EXTRA] + rs.sample(short, 1500)
    write_encodings(os.path.join(OUT, "encode_small.bin"),
                    [(i, small.encode(corpus[i], add_special_tokens=False).ids) for i in sample])
    sj = json.loads(small_text)
    sj["pre_tokenizer"]["add_prefix_space"] = True
    smallp = Tokenizer.from_str(json.dumps(sj, ensure_ascii=False))
    write_encodings(os.path.join(OUT, "encode_small_prefix.bin"),
                    [(i, smallp.encode(corpus[i], add_special_tokens=False).ids)
                     for i in sample[:600]])

    # pre-tokenizer and model variants of the small tokenizer (patches applied by the C test too)
    v3_pre = json.loads(v3_text)["pre_tokenizer"]
    bl = lambda rx: {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                     "use_regex": rx}
    split = lambda pat, beh, inv, kind="Regex": {"type": "Split", "pattern": {kind: pat},
                                                 "behavior": beh, "invert": inv}
    seq = lambda *ps: {"type": "Sequence", "pretokenizers": list(ps)}
    variants = [
        ("removed_string", {"pre_tokenizer": seq(split(" ", "Removed", False, "String"), bl(False))}),
        ("isolated_invert", {"pre_tokenizer": seq(split("\\s+|\\p{P}+", "Isolated", True), bl(False))}),
        ("removed_invert", {"pre_tokenizer": seq(split("\\p{L}+|\\p{N}+", "Removed", True), bl(True))}),
        ("nonspace_runs", {"pre_tokenizer": seq(split("\\S+", "Isolated", False), bl(False))}),
        ("deepseek_pre", {"pre_tokenizer": v3_pre}),
        ("ignore_merges", {"model.ignore_merges": True}),
        ("empty_normalizer_seq", {"normalizer": {"type": "Sequence", "normalizers": []}}),
    ]
    manifest = []
    rv = random.Random(SEED + 6)
    for name, patch in variants:
        j = json.loads(small_text)
        for k, val in patch.items():
            if k.startswith("model."):
                j["model"][k[6:]] = val
            else:
                j[k] = val
        tv = Tokenizer.from_str(json.dumps(j, ensure_ascii=False))
        idx = sample[:len(SMALL_EXTRA)] + rv.sample(sample, 250)
        fname = f"encode_var_{name}.bin"
        write_encodings(os.path.join(OUT, fname),
                        [(i, tv.encode(corpus[i], add_special_tokens=False).ids) for i in idx])
        manifest.append({"name": name, "patch": patch, "file": fname})
    with open(os.path.join(OUT, "variants.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, ensure_ascii=False, indent=1)

    # chat templates
    bos = cfg["bos_token"]["content"] if isinstance(cfg["bos_token"], dict) else cfg["bos_token"]
    cases = []
    for conv in conversations():
        for fam, tmpl, tk in (("v3", cfg["chat_template"], v3), ("r1", R1_TEMPLATE, r1)):
            for gen in (True, False):
                text = render(tmpl, conv, gen, bos)
                ids = tk.encode(text, add_special_tokens=False).ids
                cases.append({"family": fam, "add_generation_prompt": gen, "messages": conv,
                              "text": text, "ids": ids})
    with open(os.path.join(OUT, "chat_cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, separators=(",", ":"))

    malformed(v3_text, os.path.join(OUT, "malformed"))
    unicode_tables(os.path.join(ROOT, "rollout", "tokenizer", "unicode_extra.h"))
    total = sum(len(s.encode()) for s in corpus)
    print(f"corpus: {len(corpus)} strings, {total} bytes, {ntok} V3 tokens; "
          f"{len(plain_idx)} plain, {len(r1_texts)} r1, {len(decs)} decode, {len(sample)} small, "
          f"{len(cases)} chat cases", file=sys.stderr)


if __name__ == "__main__":
    main()
