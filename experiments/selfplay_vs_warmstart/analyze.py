#!/usr/bin/env python3
"""Summarise a selfplay-vs-warmstart experiment dir (see README.md): results.md, three SVG plots
and a one-line JSON summary. Standard library only.

usage: analyze.py OUT
"""
import glob, json, math, os, re, subprocess, sys

TYPES = ["deduction", "abduction", "induction"]
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]


def by_seed(out, pattern):
    """{seed: path} for out/<prefix>-<seed>/... files."""
    res = {}
    for p in glob.glob(os.path.join(out, pattern)):
        m = re.search(r"-(\d+)(?:/|\.json$)", p[len(out):])
        if m:
            res[int(m.group(1))] = p
    return res


def load_json(p):
    with open(p) as f:
        return json.load(f)


def load_metrics(p):
    rows = []
    with open(p) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def mean_std(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, None
    m = sum(xs) / len(xs)
    s = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, s


def fmt(m, s=None, pct=True):
    if m is None:
        return "n/a"
    k = 100.0 if pct else 1.0
    if s is None:
        return f"{m * k:.1f}"
    return f"{m * k:.1f} ± {s * k:.1f}"


def machine():
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        n = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    except OSError:
        n = str(os.cpu_count())
    return f"{model}, {n} cores (nproc)"


# ------------------------------------------------------------------------------------------ SVG
def svg_plot(path, title, ylabel, series, hlines=(), ymin=0.0, ymax=1.0):
    """series: [(label, color, [(x, y), ...])]; hlines: [(label, color, y, dasharray)]."""
    W, H, L, R, T, B = 640, 400, 60, 170, 30, 45  # size and margins (right margin holds the legend)
    xs = [x for _, _, pts in series for x, _ in pts] or [0, 1]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)
    ys = [y for _, _, pts in series for _, y in pts] + [y for _, _, y, _ in hlines]
    if ys:
        ymin, ymax = min(ymin, min(ys)), max(ymax, max(ys))
    if ymax <= ymin:
        ymax = ymin + 1
    px = lambda x: L + (x - x0) / (x1 - x0) * (W - L - R)
    py = lambda y: H - B - (y - ymin) / (ymax - ymin) * (H - T - B)
    esc = lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="14">{esc(title)}</text>',
         f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
         f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>']
    for i in range(6):  # y ticks
        y = ymin + (ymax - ymin) * i / 5
        o.append(f'<line x1="{L - 4}" y1="{py(y):.1f}" x2="{L}" y2="{py(y):.1f}" stroke="black"/>')
        o.append(f'<text x="{L - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.2f}</text>')
    step = max(1, math.ceil((x1 - x0) / 8))
    for x in range(int(x0), int(x1) + 1, step):  # x ticks
        o.append(f'<line x1="{px(x):.1f}" y1="{H - B}" x2="{px(x):.1f}" y2="{H - B + 4}" stroke="black"/>')
        o.append(f'<text x="{px(x):.1f}" y="{H - B + 16}" text-anchor="middle">{x}</text>')
    o.append(f'<text x="{(L + W - R) / 2}" y="{H - 8}" text-anchor="middle">self-play step</text>')
    o.append(f'<text x="14" y="{(T + H - B) / 2}" text-anchor="middle" transform="rotate(-90 14 {(T + H - B) / 2})">{esc(ylabel)}</text>')
    legend = []
    for label, color, y, dash in hlines:
        o.append(f'<line x1="{L}" y1="{py(y):.1f}" x2="{W - R}" y2="{py(y):.1f}" stroke="{color}" stroke-dasharray="{dash}" opacity="0.7"/>')
        legend.append((label, color, dash))
    for label, color, pts in series:
        if pts:
            p = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
            o.append(f'<polyline points="{p}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        legend.append((label, color, None))
    for i, (label, color, dashed) in enumerate(legend):  # legend, right of the plot
        y = T + 10 + 15 * i
        dash = f' stroke-dasharray="{dashed}"' if dashed else ""
        o.append(f'<line x1="{W - R + 10}" y1="{y}" x2="{W - R + 30}" y2="{y}" stroke="{color}" stroke-width="1.5"{dash}/>')
        o.append(f'<text x="{W - R + 34}" y="{y + 4}">{esc(label)}</text>')
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


def curve(rows, key):
    return [(r["step"], r[key]) for r in rows if key in r and r[key] is not None and "step" in r]


# ----------------------------------------------------------------------------------------- main
def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1].rstrip("/")
    boots = {s: load_json(p) for s, p in by_seed(out, "boot-*/bootstrap.json").items()}
    ctls = {s: load_json(p) for s, p in by_seed(out, "control-*/bootstrap.json").items()}
    sps = {s: load_metrics(p) for s, p in by_seed(out, "selfplay-*/metrics.jsonl").items()}
    timing = {s: load_json(p) for s, p in by_seed(out, "timing-*.json").items()}
    seeds = sorted(set(boots) | set(sps) | set(ctls))
    if not seeds:
        sys.exit(f"analyze.py: no boot-*/selfplay-*/control-* results under {out}")

    def sp_last(s, t):  # self-play's last held-out evaluation
        pts = curve(sps.get(s, []), f"heldout/accuracy/{t}")
        return pts[-1][1] if pts else None

    def sp_start(s, t):  # self-play's step-0 evaluation (should equal the warm start's)
        pts = [p for p in curve(sps.get(s, []), f"heldout/accuracy/{t}") if p[0] == 0]
        return pts[0][1] if pts else None

    acc = lambda rep, t: rep["heldout_accuracy"]["after"][t] if rep else None
    table, summary = [], {"out": out, "seeds": seeds, "types": {}}
    for t in TYPES + ["mean"]:
        def col(f):
            if t == "mean":
                vals = {s: [f(s, u) for u in TYPES] for s in seeds}
                return [sum(v) / len(v) if None not in v else None for v in vals.values()]
            return [f(s, t) for s in seeds]
        # The warm-start level: self-play's step-0 evaluation (the warm-start model under the
        # very evaluation settings of the later points), else the warm start's own report.
        warm = col(lambda s, u: sp_start(s, u) if sp_start(s, u) is not None else acc(boots.get(s), u))
        sp = col(sp_last)
        ctl = col(lambda s, u: acc(ctls.get(s), u))
        d_warm = [a - b if None not in (a, b) else None for a, b in zip(sp, warm)]
        d_ctl = [a - b if None not in (a, b) else None for a, b in zip(sp, ctl)]
        (wm, ws), (sm, ss), (cm, cs) = mean_std(warm), mean_std(sp), mean_std(ctl)
        (dwm, dws), (dcm, dcs) = mean_std(d_warm), mean_std(d_ctl)
        spread = max(x for x in (ws, ss, cs, 0.0) if x is not None)
        table.append(f"| {t} | {fmt(wm, ws)} | {fmt(sm, ss)} | {fmt(cm, cs)} | {fmt(dwm, dws)} | {fmt(dcm, dcs)} | {fmt(spread)} |")
        summary["types"][t] = {"warm_start": wm, "selfplay": sm, "control": cm,
                               "selfplay_minus_warm": dwm, "selfplay_minus_control": dcm, "spread_std": spread}

    # timing per phase, from the reports and run.sh's wall clock
    trows, totals = [], {"warm": [], "sp": [], "ctl": []}
    for s in seeds:
        b, c, tm, rows = boots.get(s), ctls.get(s), timing.get(s, {}), sps.get(s, [])
        ws = b["warm_start"]["seconds"] if b else None
        sp_wall = tm.get("selfplay_wall_s")
        sp_eval = sum(r.get("time/eval_s", 0) or 0 for r in rows)
        cs = c["warm_start"]["seconds"] if c else None
        totals["warm"].append(ws); totals["sp"].append(sp_wall); totals["ctl"].append(cs)
        g = lambda x, n=1: "n/a" if x is None else f"{x:.{n}f}"
        # the control's "before" is the warm-start model on the very held-out tasks self-play
        # evaluates (run.sh's HELDOUT may differ from the warm start's own heldout.jsonl)
        before = (lambda t: c["heldout_accuracy"]["before"][t]) if c else (lambda t: acc(b, t))
        same = [None not in (sp_start(s, t), before(t)) and abs(sp_start(s, t) - before(t)) < 1e-9
                for t in TYPES] if (b or c) else []
        trows.append(f"| {s} | {g(ws)} ({b['warm_start']['steps'] if b else '?'} steps) | {g(sp_wall)} "
                     f"({max([r.get('step', 0) for r in rows] or [0])} steps, {g(sp_eval)} s eval) | "
                     f"{g(cs)} ({c['warm_start']['steps'] if c else '?'} steps; {g(tm.get('control_wall_s'))} s wall) | "
                     f"{'yes' if same and all(same) else 'NO'} |")
    summary["seconds"] = {k: mean_std(v)[0] for k, v in
                          (("warm_start", totals["warm"]), ("selfplay", totals["sp"]), ("control", totals["ctl"]))}

    md = [f"# Self-play vs. warm start: results ({out})", "",
          f"Seeds: {', '.join(map(str, seeds))}. Machine: {machine()}.", "",
          "Held-out solver accuracy (%, greedy, graded in the sandbox; mean ± std over seeds). "
          "Warm start = self-play's step-0 `heldout/accuracy/<type>` (the warm-start model, evaluated as the "
          "later points are), else `boot-*/bootstrap.json` after; self-play = last `heldout/accuracy/<type>` in "
          "`selfplay-*/metrics.jsonl`; control = `control-*/bootstrap.json` after (same held-out tasks). "
          "Spread = the largest per-arm std over seeds: a margin smaller than it is not evidence.", "",
          "| type | warm start | self-play | control | self-play − warm | self-play − control | spread (std) |",
          "|---|---|---|---|---|---|---|", *table, "",
          "Timing per seed (s). Warm start and control: `warm_start.seconds` (optimizer time); self-play: "
          "wall clock of `azr train` (model load, seeding, evaluations included). The control gets "
          "round(self-play wall / warm-start seconds per step) steps. Last column: self-play's step-0 "
          "held-out accuracy equals the control's `before` (the same warm-start model on the same tasks, "
          "evaluated by `azr bootstrap`), else `boot-*/bootstrap.json` after.", "",
          "| seed | warm start | self-play | control | step 0 = warm start |", "|---|---|---|---|---|", *trows, "",
          "Plots: `heldout_accuracy.svg`, `validity.svg`, `learnability.svg`.", ""]
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(md))

    # plots: one line per seed x type (colour = type)
    acc_series, val_series, learn_series, hl = [], [], [], []
    for i, t in enumerate(TYPES):
        color = COLORS[i]
        for s in seeds:
            rows = sps.get(s, [])
            acc_series.append((f"{t[:3]} seed {s}", color, curve(rows, f"heldout/accuracy/{t}")))
            val_series.append((f"{t[:3]} seed {s}", color, curve(rows, f"proposer/valid_rate/{t}")))
            learn_series.append((f"{t[:3]} seed {s}", color, curve(rows, f"proposer/learnability/{t}")))
        w, c = summary["types"][t]["warm_start"], summary["types"][t]["control"]
        if w is not None:
            hl.append((f"{t[:3]} warm start", color, w, "2,3"))
        if c is not None:
            hl.append((f"{t[:3]} control", color, c, "8,4"))
    svg_plot(os.path.join(out, "heldout_accuracy.svg"), "Held-out accuracy during self-play",
             "held-out accuracy", acc_series, hl)
    svg_plot(os.path.join(out, "validity.svg"), "Proposer valid rate", "valid rate", val_series)
    mean_learn = []
    for j, s in enumerate(seeds):  # mean over types of proposer/learnability, per step
        pts = {}
        for t in TYPES:
            for x, y in curve(sps.get(s, []), f"proposer/learnability/{t}"):
                pts.setdefault(x, []).append(y)
        mean_learn.append((f"mean, seed {s}", COLORS[(3 + j) % len(COLORS)],
                           sorted((x, sum(v) / len(v)) for x, v in pts.items())))
    svg_plot(os.path.join(out, "learnability.svg"), "Proposer learnability (mean over types)",
             "learnability", mean_learn)

    line = {"out": out, "seeds": seeds,
            **{f"{k}_{t}": summary["types"][t][k] for t in ("mean",) for k in
               ("warm_start", "selfplay", "control", "selfplay_minus_warm", "selfplay_minus_control", "spread_std")},
            "seconds": summary["seconds"]}
    print(json.dumps(line))


if __name__ == "__main__":
    main()
