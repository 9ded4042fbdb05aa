#!/usr/bin/env python3
"""Builds the Qwen2 and Llama 3 tokenizer.json files of data/family-tokenizers/ from public
packages, and checks each against the expected ids that ship beside the llama.cpp vocabularies.

Inputs (PyPI packages; nothing is fetched by this script):
  --llamacpp DIR   vendor/llama.cpp/models of the llama-cpp-python 0.3.36 sdist
                   (pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36)

Qwen2 (Qwen1.5/2/2.5/3 and R1-Distill-Qwen share one vocabulary and merges): vocab and merges
come from ggml-vocab-qwen2.gguf (llama.cpp's conversion of Qwen1.5-7B's tokenizer), the
normalizer (NFC), pre-tokenizer regex and added tokens are written here as the models' own
tokenizer.json files have them. Llama 3 likewise from ggml-vocab-llama-bpe.gguf (llama.cpp's
conversion of Meta-Llama-3's tokenizer: vocab, merges, the 256 control tokens), with the Llama 3
pre-tokenizer regex, post-processor and decoder written here; Llama 3.1 and R1-Distill-Llama
rename some reserved added tokens. Output: data/family-tokenizers/tokenizers.tar.xz holding
<variant>/tokenizer.json and <variant>/tokenizer_config.json.

  python3 tools/make_family_tokenizers.py --llamacpp DIR
"""
import argparse, io, json, os, struct, sys, tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "data", "family-tokenizers")

QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
               r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def read_gguf_kv(path):
    """The key/value header of a GGUF file (the tensors are not read)."""
    d = open(path, "rb").read()
    p = 0

    def u(fmt):
        nonlocal p
        v = struct.unpack_from("<" + fmt, d, p)[0]
        p += struct.calcsize("<" + fmt)
        return v

    def s():
        nonlocal p
        n = u("Q")
        v = d[p:p + n].decode("utf-8")
        p += n
        return v
    scal = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}

    def val(t):
        if t in scal:
            return u(scal[t])
        if t == 8:
            return s()
        if t == 9:
            et, n = u("I"), u("Q")
            return [val(et) for _ in range(n)]
        raise ValueError("gguf type %d" % t)
    if d[:4] != b"GGUF":
        sys.exit("%s: not a GGUF file" % path)
    p = 4
    u("I"), u("Q")
    kv = {}
    for _ in range(u("Q")):
        k = s()
        kv[k] = val(u("I"))
    return kv


def tok(i, content, special, **kw):
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": special}


QWEN25_ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
                "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
                "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
                "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]
QWEN_NONSPECIAL = {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
                   "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
                   "<tool_response>", "</tool_response>", "<think>", "</think>"}
QWEN3_ADDED = QWEN25_ADDED + ["<tool_response>", "</tool_response>", "<think>", "</think>"]
# DeepSeek-R1-Distill-Qwen's added tokens, as its tokenizer.json has them.
R1Q_ADDED = [("<｜end▁of▁sentence｜>", True), ("<｜User｜>", False), ("<｜Assistant｜>", False),
             ("<｜begin▁of▁sentence｜>", True), ("<|EOT|>", False), ("<think>", False),
             ("</think>", False)] + [(t, t not in QWEN_NONSPECIAL) for t in QWEN25_ADDED[7:]]


def qwen_json(kv, added):
    tokens, merges = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.merges"]
    types = kv["tokenizer.ggml.token_type"]
    n = next(i for i, t in enumerate(types) if t != 1)  # first non-normal token: 151643
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
          "use_regex": False}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [tok(n + i, c, s) for i, (c, s) in enumerate(added)],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated",
             "invert": False}, bl]},
        "post_processor": bl, "decoder": bl,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False,
                  "vocab": {tokens[i]: i for i in range(n)}, "merges": merges}}


LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def llama_json(kv):
    """Meta-Llama-3's tokenizer.json from llama.cpp's ggml-vocab-llama-bpe.gguf (its conversion of
    that file: the same 128,000 entries, 280,147 merges and 256 control tokens), with the
    pre-tokenizer, post-processor and decoder that file has."""
    tokens, merges = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.merges"]
    types = kv["tokenizer.ggml.token_type"]
    n = next(i for i, t in enumerate(types) if t != 1)  # first control token: 128000
    assert n == 128000 and len(tokens) == 128256 and set(types[n:]) == {3}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [tok(i, tokens[i], True) for i in range(n, len(tokens))],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": {tokens[i]: i for i in range(n)}, "merges": merges}}


def llama_variant(base, renames):
    d = json.loads(json.dumps(base))
    for a in d["added_tokens"]:
        if a["id"] in renames:
            a["content"], a["special"] = renames[a["id"]]
    return d


LLAMA31 = {128002: ("<|reserved_special_token_0|>", True),
           128003: ("<|reserved_special_token_1|>", True),
           128004: ("<|finetune_right_pad_id|>", True),
           128005: ("<|reserved_special_token_2|>", True),
           128008: ("<|eom_id|>", True), 128010: ("<|python_tag|>", True)}
LLAMA31.update({128011 + k: ("<|reserved_special_token_%d|>" % (3 + k), True)
                for k in range(245)})
# DeepSeek-R1-Distill-Llama (built on Llama 3.1/3.3): BOS/EOS renamed, the R1 role and think
# tokens in reserved slots.
R1L = dict(LLAMA31)
R1L.update({128000: ("<｜begin▁of▁sentence｜>", True), 128001: ("<｜end▁of▁sentence｜>", True),
            128011: ("<｜User｜>", False), 128012: ("<｜Assistant｜>", False),
            128013: ("<think>", False), 128014: ("</think>", False),
            128015: ("<｜▁pad▁｜>", True)})


def templates():
    t = {}
    for name in os.listdir(os.path.join(ROOT, "data", "chat-templates")):
        if name.endswith(".jinja"):
            t[name[:-6]] = open(os.path.join(ROOT, "data", "chat-templates", name),
                                encoding="utf-8").read()
    return t


def configs(t):
    c = lambda bos, eos, tmpl, **kw: dict({"bos_token": bos, "eos_token": eos,
                                           "chat_template": t[tmpl]}, **kw)
    return {
        "qwen2.5": c(None, "<|im_end|>", "qwen2.5", pad_token="<|endoftext|>"),
        "qwen3": c(None, "<|im_end|>", "qwen3", pad_token="<|endoftext|>"),
        "r1-distill-qwen": c("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "r1-distill"),
        "llama3": c("<|begin_of_text|>", "<|eot_id|>", "llama3"),
        "llama3.1": c("<|begin_of_text|>", "<|eot_id|>", "llama3.1"),
        "r1-distill-llama": c("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "r1-distill"),
    }


def check_llamacpp(path_json, vocab_gguf):
    """Compares HF tokenizers on our file with the ids llama.cpp keeps beside its vocabulary
    (written by llama.cpp's test generator from the model's own tokenizer with HF)."""
    from tokenizers import Tokenizer
    tk = Tokenizer.from_str(path_json)
    inp = open(vocab_gguf + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
    out = open(vocab_gguf + ".out", encoding="utf-8").read().split("\n")
    bad = 0
    for i, s in enumerate(inp):
        if i >= len(out):
            break
        want = [int(x) for x in out[i].split()]
        got = tk.encode(s, add_special_tokens=False).ids
        bad += got != want
    print("%s: %d strings, %d differ" % (os.path.basename(vocab_gguf), len(inp), bad))
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llamacpp", required=True)
    a = ap.parse_args()
    kv = read_gguf_kv(os.path.join(a.llamacpp, "ggml-vocab-qwen2.gguf"))
    files = {
        "qwen2.5": qwen_json(kv, [(t, t not in QWEN_NONSPECIAL) for t in QWEN25_ADDED]),
        "qwen3": qwen_json(kv, [(t, t not in QWEN_NONSPECIAL) for t in QWEN3_ADDED]),
        "r1-distill-qwen": qwen_json(kv, R1Q_ADDED),
    }
    base = llama_json(read_gguf_kv(os.path.join(a.llamacpp, "ggml-vocab-llama-bpe.gguf")))
    files["llama3"] = base
    files["llama3.1"] = llama_variant(base, LLAMA31)
    files["r1-distill-llama"] = llama_variant(base, R1L)
    bad = check_llamacpp(json.dumps(files["qwen2.5"]),
                         os.path.join(a.llamacpp, "ggml-vocab-qwen2.gguf"))
    bad += check_llamacpp(json.dumps(base), os.path.join(a.llamacpp, "ggml-vocab-llama-bpe.gguf"))
    if bad:
        sys.exit("the rebuilt files do not reproduce llama.cpp's expected ids")
    cfgs = configs(templates())
    os.makedirs(OUT, exist_ok=True)
    with tarfile.open(os.path.join(OUT, "tokenizers.tar.xz"), "w:xz",
                      preset=9 | __import__("lzma").PRESET_EXTREME) as tar:
        for name in sorted(files):
            for fn, obj in (("tokenizer.json", files[name]),
                            ("tokenizer_config.json", cfgs[name])):
                data = json.dumps(obj, ensure_ascii=False, indent=None if fn[9] == "." else 2)
                data = data.encode("utf-8")
                ti = tarfile.TarInfo("%s/%s" % (name, fn))
                ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
                tar.addfile(ti, io.BytesIO(data))
    print("wrote", os.path.join(OUT, "tokenizers.tar.xz"))


if __name__ == "__main__":
    main()
