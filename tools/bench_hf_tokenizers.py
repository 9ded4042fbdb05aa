#!/usr/bin/env python3
"""Times HF `tokenizers` encoding the tokenizer test corpus on ONE thread, for `grpo bench tokenize`.

    RAYON_NUM_THREADS=1 python3 tools/bench_hf_tokenizers.py --tokenizer T.json --corpus corpus.bin

Prints one JSON line: bytes, tokens, and for each mode the best-of-N CPU seconds of the process
(time.process_time: all threads, so rayon's worker counts), MB/s and tokens/s.
Modes: "batch" = Tokenizer.encode_batch over the whole corpus (Rust loop, rayon pinned to one
thread: the fairest comparison), "loop" = Tokenizer.encode per string from Python.
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("RAYON_RS_NUM_CPUS", "1")


def read_corpus(path):
    data = open(path, "rb").read()
    if data[:6] != b"GTKC1\n":
        sys.exit(f"{path}: not a corpus file")
    pos = 6

    def varint():
        nonlocal pos
        v = shift = 0
        while True:
            b = data[pos]
            pos += 1
            v |= (b & 0x7F) << shift
            if not b & 0x80:
                return v
            shift += 7

    out = []
    for _ in range(varint()):
        n = varint()
        out.append(data[pos:pos + n].decode("utf-8"))
        pos += n
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from tokenizers import Tokenizer
    import tokenizers
    corpus = read_corpus(args.corpus)
    nbytes = sum(len(s.encode("utf-8")) for s in corpus)
    tok = Tokenizer.from_file(args.tokenizer)
    res = {"version": tokenizers.__version__, "bytes": nbytes, "strings": len(corpus)}
    for mode in ("batch", "loop"):
        best, ntok = None, 0
        for _ in range(args.repeat):
            t0 = time.process_time()
            if mode == "batch":
                encs = tok.encode_batch(corpus, add_special_tokens=False)
            else:
                encs = [tok.encode(s, add_special_tokens=False) for s in corpus]
            dt = time.process_time() - t0
            ntok = sum(len(e.ids) for e in encs)
            best = dt if best is None else min(best, dt)
        res[mode] = {"seconds": best, "mb_s": nbytes / best / 1e6, "tok_s": ntok / best}
        res["tokens"] = ntok
    print(json.dumps(res))


if __name__ == "__main__":
    main()
