#!/usr/bin/env python3
"""Reads a training run's metrics.jsonl and says whether the run trained: every step from 1 to
--steps has exactly one line, some step trained tokens, and every step that trained tokens has a
finite loss and gradient norm (azr writes a NaN or infinity as null). Prints one row a step of
what a reader of a first run on new hardware looks at: losses, the gradient norm, accuracy, time
split, throughput; and the evaluations' scores. For scripts/gpu_check.sh pending's end-to-end
run on a GPU.

    python3 scripts/train_run_check.py RUN_DIR --steps N [--replicas]

--replicas: the run had several ranks and run.check_replicas on; every step must say its ranks
held identical weights (replicas/identical = 1; azr stops a run where they differ).

Exit status 0 when the run trained, 1 (with the first problem named) when not, 2 for usage.
"""
import argparse
import json
import math
import os
import sys

# (key, column title, format): the row a step.
COLUMNS = [
    ("loss/total", "loss", "{:.4f}"),
    ("loss/pg", "pg", "{:.4f}"),
    ("loss/entropy", "entropy", "{:.3f}"),
    ("optim/grad_norm", "grad_norm", "{:.3g}"),
    ("tokens/trained", "trained", "{:.0f}"),
    ("solver/accuracy", "solver_acc", "{:.3f}"),
    ("proposer/valid_rate", "valid", "{:.3f}"),
    ("time/generate_s", "gen_s", "{:.2f}"),
    ("time/sandbox_s", "sandbox_s", "{:.2f}"),
    ("time/update_s", "update_s", "{:.2f}"),
    ("perf/generate_tokens_per_s", "gen_tok/s", "{:.0f}"),
]
# Must be finite numbers on a step that trained tokens.
REQUIRED = ["loss/total", "optim/grad_norm"]


class RunProblem(Exception):
    pass


def read_lines(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise RunProblem(f"{path}: cannot read ({e.strerror})")
    lines = []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except json.JSONDecodeError as e:
            raise RunProblem(f"{path}:{number}: not JSON ({e.msg})")
        if not isinstance(line, dict) or not isinstance(line.get("step"), int):
            raise RunProblem(f"{path}:{number}: no integer 'step'")
        lines.append((number, line))
    return lines


def check(path, steps, replicas=False):
    """The steps' lines (step -> line), the evaluation lines, or RunProblem naming the first fault."""
    by_step, evals = {}, []
    for number, line in read_lines(path):
        step = line["step"]
        if any(key.startswith("eval/") or key.startswith("heldout/") for key in line):
            evals.append(line)
        if "loss/total" not in line and "tokens/trained" not in line:
            continue  # an evaluation's own line (step 0 or an eval step)
        if step in by_step:
            raise RunProblem(f"{path}:{number}: step {step} written twice")
        if not 1 <= step <= steps:
            raise RunProblem(f"{path}:{number}: step {step} outside 1..{steps}")
        if (line.get("tokens/trained") or 0) > 0:
            for key in REQUIRED:
                value = line.get(key)
                if not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise RunProblem(f"{path}:{number}: step {step} trained tokens but {key} is "
                                     f"{'missing' if key not in line else json.dumps(value)}")
        if replicas and line.get("replicas/identical") != 1:
            raise RunProblem(f"{path}:{number}: step {step} does not say its ranks held identical weights "
                             f"(replicas/identical is {json.dumps(line.get('replicas/identical'))})")
        by_step[step] = line
    missing = [s for s in range(1, steps + 1) if s not in by_step]
    if missing:
        raise RunProblem(f"{path}: no line for step{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(map(str, missing))} of 1..{steps}")
    # A run can skip a step's update (no trainable sequences), not all of them.
    if not any((line.get("tokens/trained") or 0) > 0 for line in by_step.values()):
        raise RunProblem(f"{path}: no step of 1..{steps} trained a token")
    return by_step, evals


def cell(line, key, fmt):
    value = line.get(key)
    if value is None:
        return "-" if key not in line else "null"
    return fmt.format(value)


def table(by_step, evals):
    rows = [["step"] + [title for _, title, _ in COLUMNS]]
    for step in sorted(by_step):
        rows.append([str(step)] + [cell(by_step[step], key, fmt) for key, _, fmt in COLUMNS])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
    for line in evals:
        scores = {k: v for k, v in line.items() if k.startswith("eval/") or k.startswith("heldout/")}
        out.append(f"evaluation at step {line['step']}: " +
                   ", ".join(f"{k} {'null' if v is None else f'{v:.3f}'}" for k, v in sorted(scores.items())))
    return "\n".join(out)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--steps", type=int, required=True, help="the steps the run was to reach")
    parser.add_argument("--replicas", action="store_true", help="every step checked its ranks' weights")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    path = os.path.join(args.run_dir, "metrics.jsonl")
    try:
        by_step, evals = check(path, args.steps, args.replicas)
    except RunProblem as e:
        print(f"train_run_check: {e}", file=sys.stderr)
        return 1
    print(table(by_step, evals))
    agree = ", every rank's weights identical" if args.replicas else ""
    print(f"train_run_check: {args.steps} steps trained, losses and gradient norms finite{agree}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
