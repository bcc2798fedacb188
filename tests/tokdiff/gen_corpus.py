#!/usr/bin/env python3
"""Corpora for the tokenizer differential test and benchmark (azr BpeTokenizer vs HF Rust `tokenizers`).

Deterministic: the same arguments give byte-identical output (fixed seed, sorted file lists).
Every output line is JSON `{"text": ...}` (ASCII-escaped, so only '\\n' ends a line).

  gen_corpus.py diff  --shared DIR --n N [--seed S] --out FILE
      N mixed strings: benchmark code (whole programs, single lines, random slices), random
      Unicode across planes, whitespace runs (U+00A0 U+3000 U+2028 U+0085 U+FEFF U+200B ...),
      contractions, digit runs, embedded special tokens, emoji, combining marks (and three long
      runs of them), NFC/NFD forms.
  gen_corpus.py bench --shared DIR --outdir DIR [--min-bytes B]
      crux_programs.jsonl  every CruxEval program as its own string
      crux_concat.jsonl    all CruxEval programs joined by a blank line, one string
      combining_marks.jsonl  three runs of 2,000 to 32,000 combining marks NFC reorders
      bench_text.jsonl     every string field of every benchmark file, repeated until >= B bytes
"""
import argparse
import glob
import gzip
import json
import os
import random

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>",
            "<|fim_suffix|>", "<|file_sep|>", "<tool_call>", "</tool_call>", "<|vision_start|>",
            # near misses: must be encoded as plain text
            "<|im_start", "im_end|>", "<|", "|>", "<|endoftext", "<think>", "</think>"]
WHITESPACE = (" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
              "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff\u200b\u180e"
              "\u200c\u200d\u2060")
CONTRACTIONS = ["'s", "'S", "'t", "'T", "'re", "'RE", "'Re", "'ve", "'VE", "'m", "'M", "'ll", "'LL",
                "'d", "'D", "'\u017f", "'K", "'\u212a", "'\u01c4", "n't", "I'm", "we'll", "they're",
                "it's", "'", "''", "'''"]
EMOJI = ["\U0001F355", "\U0001F680", "\U0001F600", "\U0001F468\u200d\U0001F469\u200d\U0001F467",
         "\U0001F1EF\U0001F1F5", "\U0001F44D\U0001F3FD", "\U0001F30D", "\U0001FA90", "\u2764\ufe0f",
         "\U0002000B", "\U0001D518", "\U0001D54F", "#\ufe0f\u20e3", "\U0001F3F3\ufe0f\u200d\U0001F308"]
COMBINING = ["\u0300", "\u0301", "\u0302", "\u0303", "\u0308", "\u0323", "\u0327", "\u0334", "\u0345",
             "\u0316", "\u0364", "\u1df7", "\u093c", "\u094d", "\u093f", "\u0e31", "\u20dd", "\ufe0f",
             "\u3099", "\u309a"]
POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    "\u00e0\u00e1\u00e2\u00e3\u00e4\u00e5\u00e6\u00e7\u00e8\u00e9\u00ea\u00eb\u00f1\u00f6\u00f8\u00fc\u00df\u0152\u0153\u017f",
    "\u6211\u60f3\u5728\u5de5\u4f5c\u4f60\u597d\u4e16\u754c\u6771\u4eac\u30bf\u30ef\u30fc\u306f\u3072\u3089\u304c\u306a\uc548\ub155\ud558\uc138\uc694",
    "\u0928\u092e\u0938\u094d\u0924\u0947\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0645\u0631\u062d\u0628\u0627\u05e9\u05dc\u05d5\u05dd",
    "\u00b2\u00b3\u00b9\u00bc\u00bd\u00be\u216b\u2163\u0663\u0664\u06f5\u0967\u0968\u0e53\u0ed4\uff11\uff12",
    "\u0410\u0411\u0412\u0430\u0431\u0432\u0393\u0394\u03b1\u03b2\u03b3",
    "\u1100\u1161\u11a8\uac00\uac01\ud7a3",  # Hangul jamo (NFC composes them)
    "e\u0301A\u030aC\u0327\u212b\u2126\u00c5",  # NFD sequences and singletons NFC rewrites
]
PLANE_RANGES = [(0x20, 0x7e), (0x80, 0x7ff), (0x800, 0x2fff), (0x3000, 0xd7ff), (0xe000, 0xffff),
                (0x10000, 0x1ffff), (0x20000, 0x3ffff), (0x40000, 0x10ffff)]


def shared_texts(shared):
    """(code, prose) lists of strings from the benchmark files, in a fixed order."""
    code, prose = [], []

    def take(rec):
        for k in sorted(rec):
            v = rec[k]
            if isinstance(v, str) and v:
                (code if k in ("code", "prompt", "canonical_solution", "test", "input", "output",
                               "entry_point", "test_list", "solution") else prose).append(v)
            elif isinstance(v, list):
                for x in v:
                    if isinstance(x, str) and x:
                        code.append(x)

    files = sorted(glob.glob(os.path.join(shared, "benchmarks", "*", "*.jsonl")) +
                   glob.glob(os.path.join(shared, "benchmarks", "*", "*.jsonl.gz")))
    for f in files:
        opener = gzip.open if f.endswith(".gz") else open
        with opener(f, "rt", encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if line:
                    take(json.loads(line))
    return code, prose


def rand_cp(rng):
    lo, hi = rng.choice(PLANE_RANGES)
    cp = rng.randint(lo, hi)
    if 0xD800 <= cp <= 0xDFFF:  # no lone surrogates: not encodable as UTF-8
        cp = 0x20
    return chr(cp)


def slice_cp(rng, s, max_len):
    if len(s) <= max_len:
        return s
    a = rng.randint(0, len(s) - max_len)
    return s[a:a + rng.randint(1, max_len)]


def synthetic(rng):
    parts = []
    for _ in range(rng.randint(1, 30)):
        r = rng.random()
        if r < 0.08:
            parts.append(rng.choice(SPECIALS))
        elif r < 0.22:
            parts.append("".join(rand_cp(rng) for _ in range(rng.randint(1, 6))))
        elif r < 0.36:
            if rng.random() < 0.5:
                parts.append(rng.choice(" \t\n\u3000\xa0\r\n\u2028\x85\ufeff\u200b") * rng.randint(1, 12))
            else:
                parts.append("".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 8))))
        elif r < 0.46:
            parts.append(rng.choice(CONTRACTIONS))
        elif r < 0.56:
            parts.append("".join(rng.choice("0123456789") for _ in range(rng.randint(1, 12))))
        elif r < 0.64:
            parts.append("".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 3))))
        elif r < 0.72:
            base = rng.choice("aeoAEOnNcCsSkK \u0915\u0e01\u3042")
            parts.append(base + "".join(rng.choice(COMBINING) for _ in range(rng.randint(1, 3))))
        else:
            p = rng.choice(POOLS)
            parts.append("".join(rng.choice(p) for _ in range(rng.randint(1, 8))))
    return "".join(parts)


def cmd_diff(args):
    rng = random.Random(args.seed)
    code, prose = shared_texts(args.shared)
    # Long runs of combining marks, which NFC puts in order by combining class (azr with a stable
    # sort, where utf8proc's bubble sort was quadratic in the run): three of the n strings.
    long_runs = ["a" + "\u0301\u0323" * 3000, "e" + "\u0301" * 2000 + "\u0323" * 2000,
                 "o" + "".join(rng.choice(COMBINING) for _ in range(3000)) + " x\u0308"]
    out = []
    for _ in range(max(args.n - len(long_runs), 0)):
        r = rng.random()
        if r < 0.12 and code:
            out.append(rng.choice(code))                      # whole program / field
        elif r < 0.24 and code:
            lines = rng.choice(code).split("\n")               # one line of code
            out.append(rng.choice(lines))
        elif r < 0.32 and (code or prose):
            out.append(slice_cp(rng, rng.choice(code + prose if r < 0.28 else prose or code), 200))
        elif r < 0.40 and code:
            # code with special tokens and odd whitespace spliced in
            s = slice_cp(rng, rng.choice(code), 300)
            i = rng.randint(0, len(s))
            out.append(s[:i] + rng.choice(SPECIALS + ["\u00a0", "\u3000", "\u2028", "\x85"]) + s[i:])
        else:
            out.append(synthetic(rng))
    out += long_runs[:args.n - len(out)]
    with open(args.out, "w", encoding="utf-8") as f:
        for s in out:
            f.write(json.dumps({"text": s}) + "\n")
    print(f"{len(out)} strings -> {args.out}")


def cmd_bench(args):
    os.makedirs(args.outdir, exist_ok=True)
    crux = []
    with open(os.path.join(args.shared, "benchmarks", "cruxeval", "cruxeval.jsonl"), encoding="utf-8") as f:
        for line in f:
            if line.strip():
                crux.append(json.loads(line)["code"])

    def write(name, texts):
        path = os.path.join(args.outdir, name)
        with open(path, "w", encoding="utf-8") as f:
            for s in texts:
                f.write(json.dumps({"text": s}) + "\n")
        nbytes = sum(len(s.encode("utf-8")) for s in texts)
        print(f"{name}: {len(texts)} strings, {nbytes} bytes")

    write("crux_programs.jsonl", crux)
    write("crux_concat.jsonl", ["\n\n".join(crux)])
    code, prose = shared_texts(args.shared)
    base = code + prose
    texts, nbytes = [], 0
    while nbytes < args.min_bytes:
        for s in base:
            texts.append(s)
            nbytes += len(s.encode("utf-8"))
            if nbytes >= args.min_bytes:
                break
    write("bench_text.jsonl", texts)
    # Runs of combining marks that NFC must reorder (U+0301 has class 230, U+0323 class 220): the
    # case where the canonical ordering's cost shows (utf8proc's bubble sort was quadratic in it).
    write("combining_marks.jsonl", ["a" + "\u0301\u0323" * n for n in (1000, 4000, 16000)])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("diff")
    d.add_argument("--shared", required=True)
    d.add_argument("--n", type=int, required=True)
    d.add_argument("--seed", type=int, default=20261122)
    d.add_argument("--out", required=True)
    b = sub.add_parser("bench")
    b.add_argument("--shared", required=True)
    b.add_argument("--outdir", required=True)
    b.add_argument("--min-bytes", type=int, default=6_000_000)
    args = ap.parse_args()
    cmd_diff(args) if args.cmd == "diff" else cmd_bench(args)


if __name__ == "__main__":
    main()
