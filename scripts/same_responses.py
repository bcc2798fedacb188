#!/usr/bin/env python3
"""Compares two `azr eval --out` files of the same items (say one checkpoint evaluated on the GPU
and on the CPU): how many responses are the same text, how many verdicts agree, and the first
items that differ. Greedy decoding in bf16 on two devices sums in different orders, so a near tie
may flip a token and the rest of that response: a count to read, not a pass or fail.

    python3 scripts/same_responses.py A.jsonl B.jsonl [--show 3]

Exit status 0 when both files hold the same (bench, id, sample) keys, 1 (naming the first key
one lacks, or a bad line) when not, 2 for usage.
"""
import argparse
import json
import sys


class Mismatch(Exception):
    pass


def read(path):
    rows = {}
    try:
        with open(path, encoding="utf-8") as f:
            for number, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                try:
                    row = json.loads(raw)
                    key = (str(row["bench"]), str(row["id"]), int(row.get("sample", 0)))
                    value = (row.get("response", ""), bool(row.get("correct")))
                except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                    raise Mismatch(f"{path}:{number}: not an azr eval result line ({e})")
                if key in rows:
                    raise Mismatch(f"{path}:{number}: a second response for {key[0]} {key[1]} sample {key[2]}")
                rows[key] = value
    except OSError as e:
        raise Mismatch(f"{path}: cannot read ({e.strerror})")
    return rows


def compare(a_path, b_path, show):
    a, b = read(a_path), read(b_path)
    for one, other, name in ((a, b, b_path), (b, a, a_path)):
        for key in sorted(one):
            if key not in other:
                raise Mismatch(f"{name} has no response for {key[0]} {key[1]} sample {key[2]}")
    keys = sorted(a)
    if not keys:
        raise Mismatch(f"{a_path} and {b_path} hold no responses")
    same = [k for k in keys if a[k][0] == b[k][0]]
    agree = [k for k in keys if a[k][1] == b[k][1]]
    lines = [f"{len(same)} of {len(keys)} responses the same text, {len(agree)} of {len(keys)} verdicts agree"]
    for k in [k for k in keys if a[k][0] != b[k][0]][:show]:
        ra, rb = a[k][0], b[k][0]
        at = next((i for i in range(min(len(ra), len(rb))) if ra[i] != rb[i]), min(len(ra), len(rb)))
        lines.append(f"  {k[0]} {k[1]} sample {k[2]}: differ from character {at}: "
                     f"{json.dumps(ra[at:at + 40])} against {json.dumps(rb[at:at + 40])}")
    return "\n".join(lines)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--show", type=int, default=3, help="differing items to show")
    args = parser.parse_args(argv)
    try:
        print(compare(args.a, args.b, args.show))
    except Mismatch as e:
        print(f"same_responses: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
