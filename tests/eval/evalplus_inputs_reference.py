"""The reference for azr's EvalPlus argument lists (eval/evalplus_inputs.cpp).

Usage: evalplus_inputs_reference.py FILE.jsonl.gz < ours.json

FILE is an EvalPlus dataset (HumanEvalPlus or MbppPlus); ours.json maps each task_id to the
argument lists azr made of its base_input + plus_input, as Python source. The truth is what
EvalPlus itself passes to the function: Python's json module reads the file (exact big integers,
Infinity), then MBPP+ tasks get EvalPlus's conversions (evalplus/data/mbpp.py,
mbpp_deserialize_inputs, transcribed below, one rule per group of tasks). Each of azr's argument
lists is read back with ast.literal_eval and must have the same repr as EvalPlus's arguments:
repr tells a tuple from a list, 0 from 0.0, and 1j from (1+1j). Prints every mismatch; exits 1 if
there is one or a task is missing.
"""

import ast
import gzip
import json
import sys

sys.set_int_max_str_digits(0)


def each(f):
    return lambda inp: [f(a) for a in inp]


def all_tuples(x):
    return tuple(all_tuples(i) for i in x) if isinstance(x, list) else x


RULES = [
    ({2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579, 596, 616, 630, 726, 740, 744, 809},
     each(tuple)),
    ({63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780},
     each(lambda lists: [tuple(x) for x in lists])),
    ({75, 413, 444, 753}, lambda inp: [[tuple(x) for x in inp[0]], inp[1]]),
    ({106, 750}, lambda inp: [inp[0], tuple(inp[1])]),
    ({124}, lambda inp: [float(inp[0]), complex(inp[1])]),
    ({250, 405, 446, 617, 720, 763, 808}, lambda inp: [tuple(inp[0]), inp[1]]),
    ({259, 401, 445}, each(lambda lists: tuple(tuple(x) for x in lists))),
    ({278}, lambda inp: [tuple(tuple(i) if isinstance(i, list) else i for i in inp[0])]),
    ({722}, lambda inp: [{k: tuple(v) for k, v in inp[0].items()}] + inp[1:]),
    ({252}, lambda inp: [complex(inp[0])]),
    ({580, 615, 791}, each(all_tuples)),
]


def evalplus_arguments(task_id, inputs):
    rule = None
    if task_id.startswith("Mbpp/"):
        number = int(task_id.split("/")[1])
        rule = next((r for ids, r in RULES if number in ids), None)
    return [tuple(rule(inp) if rule else inp) for inp in inputs]


def main():
    ours = json.load(sys.stdin)
    bad = 0
    converted = 0
    with gzip.open(sys.argv[1], "rt") as f:
        tasks = [json.loads(line) for line in f if line.strip()]
    for task in tasks:
        tid = task["task_id"]
        truth = evalplus_arguments(tid, list(task["base_input"]) + list(task["plus_input"]))
        mine = ours.get(tid)
        if mine is None or len(mine) != len(truth):
            print(f"{tid}: azr has {None if mine is None else len(mine)} inputs, EvalPlus {len(truth)}")
            bad += 1
            continue
        for k, (text, args) in enumerate(zip(mine, truth)):
            got = ast.literal_eval("(" + text + ",)") if text else ()
            if repr(got) != repr(args):
                print(f"{tid} input {k}: azr {repr(got)[:200]} EvalPlus {repr(args)[:200]}")
                bad += 1
                break
        converted += any(repr(list(a)) != repr(i) for a, i in zip(truth, task["base_input"]))
    print(f"{len(tasks)} tasks, {converted} with converted base inputs, {bad} mismatches")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
