#!/usr/bin/env python3
"""Per-kernel GPU time from an Nsight Compute report, summed by kernel name: which kernels a
workload's time goes to (scripts/gpu_check.sh's `profile` stage, on a decode run of
model_speed_bench). Reads the CSV of `ncu -i REPORT --csv --page raw` with the metric
gpu__time_duration.sum; prints the kernels by total time, their launch counts and share.

    python3 bench/kernel_profile.py REPORT.csv [--top 25] [--steps N] [--bandwidth GB/s]

--steps N: the report holds N steps of one workload; each kernel's time is also given per step.

Where the report also has dram__bytes_read.sum and dram__bytes_write.sum (either or both), each
kernel's DRAM bytes and the rate it moved them at (bytes over its own time) are printed too. A
batch-1 decode step is weights streamed plus latency; these columns split the two by kernel.
--bandwidth B (GB/s, e.g. the card's measured read rate) adds each kernel's floor (its bytes at B)
and its time over that floor, the latency the kernel adds beside its bytes.
"""
import argparse
import csv
import sys
from collections import defaultdict

TIME = "gpu__time_duration.sum"
BYTES = ("dram__bytes_read.sum", "dram__bytes_write.sum")
TIME_UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
BYTE_UNITS = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def number(text):
    return float(text.replace(",", ""))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv_path")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--steps", type=int, default=0, help="steps in the report: adds a per-step column")
    p.add_argument("--bandwidth", type=float, default=0.0, help="GB/s: adds each kernel's floor and time over it")
    args = p.parse_args()
    with open(args.csv_path, newline="") as f:
        rows = list(csv.reader(f))
    header_at = next((i for i, r in enumerate(rows) if "Kernel Name" in r and TIME in r), None)
    if header_at is None:
        sys.exit(f"kernel_profile: {args.csv_path}: no header with 'Kernel Name' and {TIME}")
    header = rows[header_at]
    name_col, time_col = header.index("Kernel Name"), header.index(TIME)
    byte_cols = [header.index(m) for m in BYTES if m in header]
    # The units row, where there is one: durations default to ns, bytes to bytes.
    units = rows[header_at + 1] if header_at + 1 < len(rows) else []
    has_units = len(units) > time_col and units[time_col].strip() in TIME_UNITS
    scale = TIME_UNITS[units[time_col].strip()] if has_units else 1e-3
    byte_scales = []
    for c in byte_cols:
        unit = units[c].strip() if has_units and len(units) > c else "byte"
        if unit not in BYTE_UNITS:
            sys.exit(f"kernel_profile: {args.csv_path}: column {header[c]}: unknown unit '{unit}'")
        byte_scales.append(BYTE_UNITS[unit])
    start = header_at + (2 if has_units else 1)
    total, count, moved = defaultdict(float), defaultdict(int), defaultdict(float)
    for r in rows[start:]:
        if len(r) <= max([name_col, time_col] + byte_cols):
            continue
        try:
            us = number(r[time_col]) * scale
            nbytes = sum(number(r[c]) * s for c, s in zip(byte_cols, byte_scales))
        except ValueError:
            continue
        name = r[name_col].split("(")[0][:90]
        total[name] += us
        count[name] += 1
        moved[name] += nbytes
    launches, all_us = sum(count.values()), sum(total.values())
    if launches == 0:
        sys.exit(f"kernel_profile: {args.csv_path}: no kernel rows")
    print(f"{launches} launches, {all_us:.1f} us of kernel time ({all_us / launches:.2f} us per launch)")
    steps = args.steps
    if steps > 0:
        print(f"per step of {steps}: {launches / steps:.1f} launches, {all_us / steps:.1f} us")
    with_bytes = bool(byte_cols)
    floor = with_bytes and args.bandwidth > 0
    if with_bytes:
        all_bytes = sum(moved.values())
        per = steps if steps > 0 else 1
        line = f"DRAM: {all_bytes / per / 1e6:.2f} MB{' per step' if steps > 0 else ''}"
        line += f", {all_bytes / (all_us * 1e3):.1f} GB/s over the kernels' time"
        if floor:
            floor_us = all_bytes / (args.bandwidth * 1e3)
            line += f"; at {args.bandwidth:.0f} GB/s {floor_us / per:.1f} us, {(all_us - floor_us) / per:.1f} us over"
        print(line)
    head = f"{'total us':>10} {'share':>6} {'count':>6} {'mean us':>8}"
    head += f" {'us/step':>8}" if steps > 0 else ""
    head += f" {'MB/step' if steps > 0 else 'MB':>8} {'GB/s':>7}" if with_bytes else ""
    head += f" {'over us':>8}" if floor else ""
    print(head + "  kernel")
    for name in sorted(total, key=total.get, reverse=True)[: args.top]:
        share, mean = 100 * total[name] / all_us, total[name] / count[name]
        line = f"{total[name]:10.1f} {share:5.1f}% {count[name]:6d} {mean:8.2f}"
        line += f" {total[name] / steps:8.2f}" if steps > 0 else ""
        if with_bytes:
            rate = moved[name] / (total[name] * 1e3) if total[name] > 0 else 0.0
            line += f" {moved[name] / (steps if steps > 0 else 1) / 1e6:8.3f} {rate:7.1f}"
        if floor:  # the time over the floor, per step where there are steps
            over = total[name] - moved[name] / (args.bandwidth * 1e3)
            line += f" {over / (steps if steps > 0 else 1):8.2f}"
        print(line + f"  {name}")


if __name__ == "__main__":
    main()
