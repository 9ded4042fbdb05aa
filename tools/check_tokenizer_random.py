#!/usr/bin/env python3
"""Seeded random texts through `grpo tokenize` vs HF `tokenizers` (DeepSeek-V3 tokenizer.json).

    python3 tools/check_tokenizer_random.py [--n 3000] [--seed 1] [--grpo build/cli/grpo]
                                            [--tokenizer data/deepseek-v3-tokenizer/tokenizer.json]
                                            [--single 200] [--chat 100]

Texts are mixtures of the categories in CATS (ASCII prose, whitespace runs, digit runs, CJK/kana/
Hangul/Thai/Arabic/Devanagari/Cyrillic, emoji with ZWJ/skin tones/flags, combining marks,
zero-width and Unicode spaces, LaTeX, code, contractions, special-token text, long repeats,
control characters incl. NUL and noncharacters).

Batching: loading the 7.8 MB tokenizer takes ~0.2 s, so all texts go through one grpo process,
joined by the special token <｜▁pad▁｜> (id 2, non-normalized, no lstrip/rstrip; never generated
inside a text). HF splits special tokens out before anything else, so the ids of the joined text,
split at id 2, are the ids of each text. --single N texts are also run one process per text (to
check the batching itself, and with --no-special vs encode_special_tokens=True).
Checks: ids == HF ids; `grpo tokenize --decode` of the ids == the text, byte-exact.
--chat N: random V3 conversations vs transformers' apply_chat_template.
Every mismatch is shrunk (delete chunks / characters while it persists) and printed.
Exit status 1 if any mismatch.
"""
import argparse
import collections
import os
import random
import subprocess
import sys

from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SEP = "<｜▁pad▁｜>"
SEP_ID = 2

WORDS = ("the of and to in is was that for on with as by at from his her they this which be have "
         "not are but were an it or their one all there been has when who will more would no if out "
         "said what up its about into than them can only other new some could time these two may "
         "Hello World HTTP JSON iPhone McDonald O'Neil naïve café résumé Zürich façade ßtraße "
         "ABC xYz CamelCase snake_case kebab-case URL https://example.com/a?b=c&d=e foo@bar.org").split()
PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + ["...", "--", "—", "–", "“", "”", "‘", "’",
                                                      "«", "»", "¿", "¡", "…", "•", "·", "§", "¶", "©", "®", "™", "°", "€", "£", "¥"]
WS = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\r", " \n", "  \n",
      "\t\n", " \t ", "\n ", "\n    ", "\n\t", " \r\n ", "\f", "\v", "\x0b\x0c"]
USPACE = ["\u00a0", "\u1680", "\u2000", "\u2001", "\u2002", "\u2003", "\u2004", "\u2005", "\u2006",
          "\u2007", "\u2008", "\u2009", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000",
          "\u0085", "\u180e"]
ZW = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u200e", "\u200f", "\u00ad", "\u034f",
      "\u2061", "\u2062", "\u2063", "\u2064", "\ufe0f", "\ufe0e", "\u061c", "\u202a", "\u202e"]
COMB = [chr(c) for c in list(range(0x300, 0x370)) + list(range(0x1ab0, 0x1ac0)) + list(range(0x20d0, 0x20f1))
        + [0x0e31, 0x0e34, 0x0e47, 0x093f, 0x094d, 0x0902, 0x0651, 0x064e, 0x3099, 0x309a]]
CJK = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坏兴"
KANA = [chr(c) for c in range(0x3041, 0x3097)] + [chr(c) for c in range(0x30a1, 0x30fb)] + ["ー", "・", "ヽ", "ゝ", "ｶﾞ", "ﾊﾟ", "ｱｲｳ"]
HANGUL = [chr(c) for c in range(0xac00, 0xd7a4, 97)] + ["\u1100\u1161", "\u1100\u1161\u11a8", "ㄱ", "ㅏ"]
THAI = [chr(c) for c in range(0x0e01, 0x0e5c)]
ARABIC = [chr(c) for c in range(0x0621, 0x064b)] + ["\u0644\u0627", "\u064b", "\u0650", "١٢٣", "۴۵۶", "؟", "،"]
DEVA = [chr(c) for c in range(0x0905, 0x0940)] + ["\u094d", "\u093e", "\u0902", "क्ष", "त्र", "०१२३"]
CYR = [chr(c) for c in range(0x0410, 0x0450)] + ["ё", "Ё", "і", "ї", "є"]
OTHER = ["Ελληνικά", "עברית", "ქართული", "Հայերեն", "ภาษาไทย", "ᠮᠣᠩᠭᠣᠯ", "ລາວ", "ខ្មែរ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟘𝟙𝟚", "Ⅻ", "½", "²³", "①②"]
EMOJI = ["😀", "😂", "🤔", "👍", "👍🏻", "👍🏿", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "🏴‍☠️", "❤️", "❤", "☺️",
         "🇺🇸", "🇯🇵", "🇩🇪🇫🇷", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "1️⃣", "#️⃣", "🧑‍🤝‍🧑", "🫠", "🪿", "🫨", "🩷", "🐦‍🔥", "🙂‍↔️", "🧑🏾‍🦯‍➡️",
         "✅", "⭐", "🔥", "💯", "🎉", "©️", "🅰️", "🀄", "🃏"]
LATEX = [r"\frac{a}{b}", r"$x^2 + y^2 = z^2$", r"\int_0^\infty e^{-x^2}\,dx = \frac{\sqrt{\pi}}{2}",
         r"\begin{align} a &= b \\ c &= d \end{align}", r"\sum_{i=1}^{n} i = \frac{n(n+1)}{2}",
         r"$$\mathbb{R}^{n\times m}$$", r"\boxed{42}", r"\left( \alpha + \beta \right)", "∀x∈ℝ: x²≥0",
         "√2 ≈ 1.41421356", "a ≤ b ≠ c ⇒ d", "∑∏∫∮", r"\text{if } x \geq 0", "O(n\\log n)", "10^{-3}",
         "3.14159e-10", "-0.5", "1,000,000", "0x1F", "1e+308"]
CODE = ["def f(x):\n    return x + 1\n", "    if (a == b) {\n        return 0;\n    }\n",
        "for i in range(10):\n\tprint(i)\n", "int main(void) { printf(\"%d\\n\", 42); }",
        "#include <stdio.h>\n", "x = [1, 2, 3]  # comment\n", "    \n        pass\n",
        "class A:\n    def __init__(self):\n        self.x = {'a': 1}\n", "a->b = c >> 2 && d != e;",
        "```python\nimport os\n```", "<div class=\"x\">&nbsp;</div>", "SELECT * FROM t WHERE a='b';",
        "fn main() -> Result<(), Box<dyn Error>> {}", "lambda x: x**2", "  \t  x\t=\t1", "''' doc '''",
        "i++;--j;", "/* multi\n * line */", "    ", "\t\t\treturn;", "$ ls -la | grep '^d'"]
CONTR = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D", "'Re", "'lL",
         "’s", "'", "''", "'x", "'st", "'dd"]
SPECIALS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<think>", "</think>", "<｜User｜>",
            "<｜Assistant｜>", "<|EOT|>", "<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>", "<｜fim▁hole｜>",
            "<｜place▁holder▁no▁0｜>", "<｜place▁holder▁no▁799｜>", "<｜place▁holder▁no▁800｜>",
            "<｜begin▁of▁sentence", "｜>", "<｜", "▁", "｜", "<｜User｜><｜User｜>", "<<｜User｜>>",
            "<｜end▁of▁sentence｜｜>", "<|User|>", "<｜tool▁output▁end｜>", "<｜fim▁begin｜>x<｜fim▁end｜>"]


def rint(r, a, b):
    return r.randint(a, b)


def g_ascii(r):
    out = []
    for _ in range(rint(r, 1, 25)):
        k = r.random()
        if k < 0.55:
            w = r.choice(WORDS)
            c = r.random()
            out.append(w.upper() if c < 0.1 else w.capitalize() if c < 0.25 else w)
        elif k < 0.7:
            out.append(str(r.randint(0, 10 ** rint(r, 1, 8))))
        elif k < 0.85:
            out.append(r.choice(PUNCT))
        else:
            out.append(r.choice(WS))
        out.append(r.choice([" ", " ", " ", "", "  ", "\t", "\n"]))
    s = "".join(out)
    if r.random() < 0.3:
        s += r.choice([" ", "  ", "   \n", "\t", " \t", "\n", "\n\n", "\r\n", "   "])
    if r.random() < 0.2:
        s = r.choice([" ", "  ", "\n", "\t"]) + s
    return s


def g_ws(r):
    return "".join(r.choice(WS + [" a", "x", "b ", ".", "你"]) for _ in range(rint(r, 1, 12)))


def g_digits(r):
    out = []
    for _ in range(rint(r, 1, 6)):
        n = rint(r, 1, 40)
        d = "".join(r.choice("0123456789") for _ in range(n))
        if r.random() < 0.15:
            d = "".join(r.choice("٠١٢٣٤٥٦٧٨٩०१२३४५६७८९０１２３４５６７８９²³¹¼½①ⅫⅩ𝟙") for _ in range(rint(r, 1, 10)))
        out.append(d)
        out.append(r.choice(["", " ", ".", ",", "-", "x", "a", "e", "\n", "$", "%", "+", "/", ":", "年", " "]))
    return "".join(out)


def _script(r, alphabet, joinp=0.2):
    out = []
    for _ in range(rint(r, 1, 30)):
        out.append(r.choice(alphabet))
        if r.random() < joinp:
            out.append(r.choice([" ", " ", "，", "。", "、", "!", "?", ".", "\n", "1", "a", "「", "」"]))
    return "".join(out)


def g_scripts(r):
    alph = r.choice([list(CJK), KANA, HANGUL, THAI, ARABIC, DEVA, CYR, OTHER, list(CJK) + KANA,
                     list(CJK) + list("abc123 ")])
    return _script(r, alph)


def g_emoji(r):
    return "".join(r.choice(EMOJI + [" ", "", "a", "你", "!", "\u200d", "\ufe0f", "🏽"]) for _ in range(rint(r, 1, 15)))


def g_comb(r):
    out = []
    for _ in range(rint(r, 1, 15)):
        out.append(r.choice("aeiouxnAEZ你αд 1.!" + "ก" + "क"))
        for _ in range(rint(r, 0, 4)):
            out.append(r.choice(COMB))
    return "".join(out)


def g_zw(r):
    return "".join(r.choice(ZW + USPACE + ["a", "b", " ", "1", ".", "你", "\n", "😀", "'s"]) for _ in range(rint(r, 1, 20)))


def g_latex(r):
    return r.choice(["", " "]).join(r.choice(LATEX + [" ", "\n", "where", "so"]) for _ in range(rint(r, 1, 6)))


def g_code(r):
    return "".join(r.choice(CODE) for _ in range(rint(r, 1, 5)))


def g_contr(r):
    out = []
    for _ in range(rint(r, 1, 12)):
        w = r.choice(["I", "you", "we", "they", "it", "he", "DON", "can", "won", "Shouldn", "y", "o", "rock", "1", "你", "é", " ", ""])
        out.append(w + r.choice(CONTR) + r.choice([" ", "", ".", "s", "\n", "'s"]))
    return "".join(out)


def g_special(r):
    out = []
    for _ in range(rint(r, 1, 8)):
        out.append(r.choice(SPECIALS) if r.random() < 0.5 else g_ascii(r)[:20])
        out.append(r.choice(["", " ", "\n", "  ", "x"]))
    return "".join(out)


def g_repeat(r):
    unit = r.choice(["a", " ", "\n", "-", "=", "0", "9", "你", "😀", "ab", "\t", ".", "!", "é", "ー", "🇺🇸",
                     "'s", "\u200b", "\u00a0", "a ", "12", "*", "_", "#", "\r\n", "ก", "ا", "\u0301"])
    n = rint(r, 1, 3000) if r.random() < 0.3 else rint(r, 1, 200)
    return r.choice(["", "x", " ", "A "]) + unit * n + r.choice(["", "x", " ", "\n"])


def g_ctrl(r):
    return "".join(r.choice([chr(c) for c in list(range(0, 32)) + [127, 0x80, 0x9f, 0xfeff, 0xfffd, 0xfffe, 0xe000, 0x10ffff, 0xe0001, 0xe0041]]
                            + ["a", " ", "1", "\x1b[31m", "你", "'s"]) for _ in range(rint(r, 1, 15)))


CATS = collections.OrderedDict([
    ("ascii", g_ascii), ("whitespace", g_ws), ("digits", g_digits), ("scripts", g_scripts),
    ("emoji", g_emoji), ("combining", g_comb), ("zero_width_spaces", g_zw), ("latex", g_latex),
    ("code", g_code), ("contractions", g_contr), ("special_tokens", g_special), ("repeats", g_repeat),
    ("controls", g_ctrl),
])


def gen(r):
    """one text: a mixture of 1-4 categories; returns (category label, text)."""
    k = 1 if r.random() < 0.5 else rint(r, 2, 4)
    names = [r.choice(list(CATS)) for _ in range(k)]
    parts = [CATS[n](r) for n in names]
    s = r.choice(["", " ", "\n"]).join(parts)
    s = s.replace(SEP, "")
    if SEP in s:
        s = s.replace("<", "")
    return (names[0] if k == 1 else "mix"), names, s


class Grpo:
    def __init__(self, exe, tok):
        self.exe, self.tok = exe, tok

    def encode(self, text, extra=()):
        p = subprocess.run([self.exe, "tokenize", "--tokenizer", self.tok, *extra], input=text.encode("utf-8", "surrogatepass"),
                           capture_output=True, timeout=300)
        if p.returncode != 0:
            return None, p.stderr.decode(errors="replace")
        return [int(x) for x in p.stdout.split()], None

    def decode(self, ids):
        p = subprocess.run([self.exe, "tokenize", "--tokenizer", self.tok, "--decode"],
                           input=" ".join(map(str, ids)).encode(), capture_output=True, timeout=300)
        return p.stdout if p.returncode == 0 else None


def shrink(s, bad):
    """delete chunks, then single characters, while bad(s) holds."""
    n = max(1, len(s) // 2)
    while n >= 1:
        i = 0
        changed = False
        while i < len(s):
            t = s[:i] + s[i + n:]
            if t != s and bad(t):
                s = t
                changed = True
            else:
                i += n
        if not changed:
            n //= 2
    return s


def check_chat(args, r):
    """--chat N random V3 conversations (contents from gen()) vs transformers' apply_chat_template
    with the tokenizer_config.json beside the tokenizer. Messages with NUL are skipped: grpo's JSON
    reader refuses \\u0000 in strings (common/json.c), by design."""
    if args.chat <= 0:
        return 0
    import json
    import tempfile
    from transformers import AutoTokenizer
    d = os.path.dirname(os.path.abspath(args.tokenizer))
    tk = AutoTokenizer.from_pretrained(d)
    nbad = n = nul = 0
    with tempfile.TemporaryDirectory() as tmp:
        mf = os.path.join(tmp, "m.json")
        for _ in range(args.chat):
            msgs = []
            if r.random() < 0.4:
                msgs.append({"role": "system", "content": gen(r)[2]})
            for t in range(rint(r, 1, 3)):
                msgs.append({"role": "user", "content": gen(r)[2]})
                if t < 2 and r.random() < 0.7:
                    msgs.append({"role": "assistant", "content": gen(r)[2]})
            gp = r.random() < 0.7
            if any("\x00" in m["content"] for m in msgs):
                nul += 1
                continue
            want = tk.apply_chat_template(msgs, tokenize=True, add_generation_prompt=gp)
            if isinstance(want, dict):
                want = want["input_ids"]
            with open(mf, "w", encoding="utf-8") as f:
                json.dump(msgs, f, ensure_ascii=False)
            p = subprocess.run([args.grpo, "tokenize", "--tokenizer", args.tokenizer, "--chat", "v3",
                                "--messages", mf] + ([] if gp else ["--no-generation-prompt"]), capture_output=True)
            n += 1
            if [int(x) for x in p.stdout.split()] != list(want):
                nbad += 1
                print("CHAT MISMATCH gen_prompt=%s %r %s" % (gp, msgs, p.stderr[:200]))
    print("chat v3: %d conversations vs transformers apply_chat_template (%d skipped: NUL)" % (n, nul))
    return nbad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--grpo", default=os.path.join(ROOT, "build", "cli", "grpo"))
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "data", "deepseek-v3-tokenizer", "tokenizer.json"))
    ap.add_argument("--chat", type=int, default=100, help="random V3 conversations vs transformers")
    ap.add_argument("--single", type=int, default=150, help="texts also run one process each (+ --no-special)")
    args = ap.parse_args()

    hf = Tokenizer.from_file(args.tokenizer)
    assert hf.token_to_id(SEP) == SEP_ID
    g = Grpo(args.grpo, args.tokenizer)
    r = random.Random(args.seed)
    texts, labels, counts, mixcounts = [], [], collections.Counter(), collections.Counter()
    for _ in range(args.n):
        lab, names, s = gen(r)
        texts.append(s)
        labels.append(lab)
        counts[lab] += 1
        for n in set(names):
            mixcounts[n] += 1
    print("texts: %d, %d chars; by category (alone): %s" % (len(texts), sum(map(len, texts)), dict(counts)))
    print("texts containing each category (alone or mixed): %s" % dict(mixcounts))

    want = [hf.encode(s, add_special_tokens=False).ids for s in texts]
    joined = SEP.join(texts)
    got_all, err = g.encode(joined)
    if got_all is None:
        sys.exit("grpo failed: " + err)
    got, cur = [], []
    for i in got_all:
        if i == SEP_ID:
            got.append(cur)
            cur = []
        else:
            cur.append(i)
    got.append(cur)
    assert len(got) == len(texts), (len(got), len(texts))

    def bad_enc(t):
        a, _ = g.encode(t)
        return a != hf.encode(t, add_special_tokens=False).ids

    def bad_dec(t):
        ids = hf.encode(t, add_special_tokens=False).ids
        return g.decode(ids) != t.encode("utf-8")

    def bad_plain(t):
        a, _ = g.encode(t, ("--no-special",))
        return a != hf.encode(t, add_special_tokens=False).ids

    nbad = 0
    for k, (s, a, b) in enumerate(zip(texts, got, want)):
        if a != b:
            nbad += 1
            if not bad_enc(s):
                print("ENCODE MISMATCH text %d (%s) only in the batch (not alone): %r" % (k, labels[k], s))
                continue
            m = shrink(s, bad_enc)
            print("ENCODE MISMATCH text %d (%s): minimal %r grpo=%s hf=%s" % (
                k, labels[k], m, g.encode(m)[0], hf.encode(m, add_special_tokens=False).ids))
    # decode round trip of all texts at once (the joined ids), then per text if it differs
    whole = g.decode(got_all)
    if whole != joined.encode("utf-8"):
        for k, s in enumerate(texts):
            if g.decode(want[k]) != s.encode("utf-8"):
                nbad += 1
                m = shrink(s, bad_dec)
                print("DECODE MISMATCH text %d (%s): minimal %r -> %r" % (k, labels[k], m, g.decode(hf.encode(m, add_special_tokens=False).ids)))
    print("batched: %d texts, %d ids, encode+decode checked" % (len(texts), len(got_all)))

    # R1 variant: ids 128798/128799 become <think>/</think> (non-special, normalized), as
    # tools/make_tokenizer_fixtures.py's r1_json, against grpo tokenize --r1
    import json
    j = json.load(open(args.tokenizer, encoding="utf-8"))
    for a in j["added_tokens"]:
        if a["id"] in (128798, 128799):
            a["content"] = "<think>" if a["id"] == 128798 else "</think>"
            a["special"] = False
            a["normalized"] = True
    hf1 = Tokenizer.from_str(json.dumps(j, ensure_ascii=False))
    got1, err = g.encode(joined, ("--r1",))
    if got1 is None:
        sys.exit("grpo --r1 failed: " + err)
    want1 = []
    for s in texts:
        want1 += hf1.encode(s, add_special_tokens=False).ids + [SEP_ID]
    want1.pop()
    if got1 != want1:
        def bad_r1(t):
            return g.encode(t, ("--r1",))[0] != hf1.encode(t, add_special_tokens=False).ids
        for k, s in enumerate(texts):
            if bad_r1(s) if ("think" in s) else False:
                nbad += 1
                m = shrink(s, bad_r1)
                print("R1 MISMATCH text %d: minimal %r" % (k, m))
        print("R1 batch differs (%d vs %d ids)" % (len(got1), len(want1)))
        nbad += 1
    p = subprocess.run([args.grpo, "tokenize", "--tokenizer", args.tokenizer, "--r1", "--decode"],
                       input=" ".join(map(str, got1)).encode(), capture_output=True)
    if p.stdout != joined.encode("utf-8"):
        nbad += 1
        print("R1 DECODE round trip differs")
    print("R1: %d texts (%d with <think> or </think>), encode+decode checked" % (
        len(texts), sum(1 for s in texts if "think>" in s)))

    # one process per text (checks the batching) and --no-special vs encode_special_tokens=True
    hf.encode_special_tokens = True
    sel = texts[: args.single]
    for k, s in enumerate(sel):
        a, _ = g.encode(s)
        if a != want[k]:
            nbad += 1
            print("SINGLE-PROCESS MISMATCH text %d: %r" % (k, s))
        a, _ = g.encode(s, ("--no-special",))
        if a != hf.encode(s, add_special_tokens=False).ids:
            nbad += 1
            m = shrink(s, bad_plain)
            print("NO-SPECIAL MISMATCH text %d: minimal %r grpo=%s hf=%s" % (
                k, m, g.encode(m, ("--no-special",))[0], hf.encode(m, add_special_tokens=False).ids))
    hf.encode_special_tokens = False
    print("single-process: %d texts (default and --no-special)" % len(sel))
    nbad += check_chat(args, r)
    print("mismatches: %d" % nbad)
    return 1 if nbad else 0


if __name__ == "__main__":
    sys.exit(main())
