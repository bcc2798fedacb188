#!/usr/bin/env python3
"""Per-kernel GPU time from an Nsight Compute report, summed by kernel name: which kernels a
workload's time goes to (scripts/gpu_check.sh's `profile` stage, on a decode run of
model_speed_bench). Reads the CSV of `ncu -i REPORT --csv --page raw` with the metric
gpu__time_duration.sum; prints the kernels by total time, their launch counts and share.

    python3 bench/kernel_profile.py REPORT.csv [--top 25] [--steps N]

--steps N: the report holds N steps of one workload; each kernel's time is also given per step.
"""
import argparse
import csv
import sys
from collections import defaultdict


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv_path")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--steps", type=int, default=0, help="steps in the report: adds a per-step column")
    args = p.parse_args()
    with open(args.csv_path, newline="") as f:
        rows = list(csv.reader(f))
    header_at = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "gpu__time_duration.sum" in r), None)
    if header_at is None:
        sys.exit(f"kernel_profile: {args.csv_path}: no header with 'Kernel Name' and gpu__time_duration.sum")
    header = rows[header_at]
    name_col, time_col = header.index("Kernel Name"), header.index("gpu__time_duration.sum")
    units = rows[header_at + 1][time_col] if header_at + 1 < len(rows) else ""
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(units.strip(), None)
    start = header_at + (2 if scale is not None else 1)
    scale = 1e-3 if scale is None else scale  # ncu's default unit for durations is ns
    total, count = defaultdict(float), defaultdict(int)
    for r in rows[start:]:
        if len(r) <= max(name_col, time_col):
            continue
        try:
            us = float(r[time_col].replace(",", "")) * scale
        except ValueError:
            continue
        name = r[name_col].split("(")[0][:90]
        total[name] += us
        count[name] += 1
    launches, all_us = sum(count.values()), sum(total.values())
    if launches == 0:
        sys.exit(f"kernel_profile: {args.csv_path}: no kernel rows")
    print(f"{launches} launches, {all_us:.1f} us of kernel time ({all_us / launches:.2f} us per launch)")
    steps = args.steps
    if steps > 0:
        print(f"per step of {steps}: {launches / steps:.1f} launches, {all_us / steps:.1f} us")
    per_step = f" {'us/step':>8}" if steps > 0 else ""
    print(f"{'total us':>10} {'share':>6} {'count':>6} {'mean us':>8}{per_step}  kernel")
    for name in sorted(total, key=total.get, reverse=True)[: args.top]:
        step_col = f" {total[name] / steps:8.2f}" if steps > 0 else ""
        share, mean = 100 * total[name] / all_us, total[name] / count[name]
        print(f"{total[name]:10.1f} {share:5.1f}% {count[name]:6d} {mean:8.2f}{step_col}  {name}")


if __name__ == "__main__":
    main()
