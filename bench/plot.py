#!/usr/bin/env python3
"""The benchmark as a picture: an SVG of bench.py's JSON (and decode.py's).

One panel per (head dim, direction): TFLOP/s against N (log scale) for each
provider in the JSON (fa, cuDNN, FA2 = SDPA flash, FlexAttention), solid
lines without a mask, dashed with the causal mask. With --decode, a last
panel of decode bandwidth (TB/s of K+V read) per shape. No dependency beyond
Python: the SVG is written by hand.

    python3 bench/plot.py bench.json [--decode decode.json] -o docs/bench.svg
"""
import argparse
import json
import math
import sys

PROVIDERS = [("fa", "fa", "#d62728"), ("cudnn", "cuDNN", "#1f77b4"),
             ("flash", "FA2 (SDPA flash)", "#2ca02c"), ("flex", "FlexAttention", "#9467bd"),
             ("copy", "copy of K+V (HBM bound)", "#7f7f7f")]
W, H, PAD_L, PAD_B, PAD_T, PAD_R = 330, 230, 46, 34, 26, 10


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class Panel:
    """One chart at (x0, y0) of the page: axes, ticks, a title."""

    def __init__(self, out, x0, y0, title, xs, ymax, xlabel, categorical=False):
        self.out, self.x0, self.y0 = out, x0, y0
        self.xs, self.ymax, self.categorical = xs, ymax, categorical
        pw, ph = W - PAD_L - PAD_R, H - PAD_T - PAD_B
        self.pw, self.ph = pw, ph
        out.append('<g transform="translate(%d,%d)">' % (x0, y0))
        out.append('<text x="%d" y="16" font-size="13" font-weight="bold">%s</text>' %
                   (PAD_L, esc(title)))
        out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>' %
                   (PAD_L, PAD_T, pw, ph))
        step = 100 if ymax > 300 else (50 if ymax > 100 else (1 if ymax <= 6 else 10))
        y = 0
        while y <= ymax:
            py = self.py(y)
            out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>' %
                       (PAD_L, PAD_L + pw, py, py))
            out.append('<text x="%d" y="%.1f" font-size="10" text-anchor="end">%g</text>' %
                       (PAD_L - 4, py + 3, y))
            y += step
        for x in xs:
            label = ("%dk" % (x // 1024)) if isinstance(x, int) and x >= 1024 else str(x)
            out.append('<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%s</text>' %
                       (self.px(x), PAD_T + ph + 13, esc(label)))
        out.append('<text x="%d" y="%d" font-size="10" text-anchor="middle">%s</text>' %
                   (PAD_L + pw // 2, PAD_T + ph + 27, esc(xlabel)))

    def px(self, x):
        """Evenly spaced points (N doubles from one to the next), or the
        centres of equal slots for categories."""
        i = self.xs.index(x)
        if self.categorical:
            return PAD_L + self.pw * (i + 0.5) / len(self.xs)
        n = max(len(self.xs) - 1, 1)
        return PAD_L + 12 + (self.pw - 24) * i / n

    def py(self, y):
        return PAD_T + self.ph - self.ph * y / self.ymax

    def line(self, points, color, dashed):
        if not points:
            return
        d = " ".join("%s%.1f,%.1f" % ("M" if i == 0 else "L", self.px(x), self.py(y))
                     for i, (x, y) in enumerate(points))
        self.out.append('<path d="%s" fill="none" stroke="%s" stroke-width="2"%s/>' %
                        (d, color, ' stroke-dasharray="5,3"' if dashed else ""))
        for x, y in points:
            self.out.append('<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>' %
                            (self.px(x), self.py(y), color))

    def bar(self, x, i, count, y, color):
        width = self.pw / len(self.xs) / (count + 1)
        cx = self.px(x) - width * count / 2 + width * i
        self.out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>' %
                        (cx, self.py(y), width * 0.9, self.py(0) - self.py(y), color))

    def close(self):
        self.out.append("</g>")


def tflops(row, key):
    r = row.get(key)
    return r.get("tflops") if isinstance(r, dict) else None


def bench_panels(rows):
    """[(title, {(provider, causal): [(n, tflops)]}, ns)] per (d, direction)."""
    panels = []
    for d in sorted({r["d"] for r in rows}):
        for direction in ("fwd", "bwd"):
            mine = [r for r in rows if r["d"] == d and r["direction"] == direction]
            if not mine:
                continue
            series = {}
            for r in mine:
                for key, _, _ in PROVIDERS:
                    t = tflops(r, key)
                    if t is not None:
                        series.setdefault((key, r["causal"]), []).append((r["n"], t))
            ns = sorted({r["n"] for r in mine})
            panels.append(("d=%d %s" % (d, "forward" if direction == "fwd" else "backward"),
                           series, ns))
    return panels


def decode_panel(rows):
    """Bars of TB/s per shape and provider from decode.py's JSON."""
    shapes, series = [], {}
    for r in rows:
        shape = "%dx%dk" % (r["B"], r["Nk"] // 1024)
        shapes.append(shape)
        for key, value in r.items():
            if isinstance(value, dict) and "TB/s" in value:
                series.setdefault(key, []).append((shape, value["TB/s"]))
    return shapes, series


def render(bench, decode):
    rows = bench["rows"]
    panels = bench_panels(rows)
    cols = 2
    count = len(panels) + (1 if decode else 0)
    rows_n = (count + cols - 1) // cols
    legend_h = 40
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif">' % (cols * W, rows_n * H + legend_h),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="8" y="16" font-size="11">%s, %s: bf16, B·N %d, hidden %d, TFLOP/s in '
           'one process; dashed: causal</text>' % (
               esc(bench.get("device", "GPU")), esc(bench.get("date", "")),
               bench.get("tokens", 0), bench.get("hidden", 0))]
    x = 8
    for key, label, color in PROVIDERS:
        if any(tflops(r, key) is not None for r in rows) or (
                decode and any(key in r for r in decode)):
            out.append('<rect x="%d" y="26" width="14" height="4" fill="%s"/>' % (x, color))
            out.append('<text x="%d" y="32" font-size="11">%s</text>' % (x + 18, esc(label)))
            x += 30 + 7 * len(label)
    ymax = max((t for _, s, _ in panels for pts in s.values() for _, t in pts), default=1)
    ymax = math.ceil(ymax / 100) * 100
    for i, (title, series, ns) in enumerate(panels):
        p = Panel(out, (i % cols) * W, legend_h + (i // cols) * H, title, ns, ymax, "N")
        colors = {k: c for k, _, c in PROVIDERS}
        for (key, causal), pts in sorted(series.items()):
            p.line(sorted(pts), colors[key], causal)
        p.close()
    if decode:
        shapes, series = decode_panel(decode)
        i = len(panels)
        top = max((v for pts in series.values() for _, v in pts), default=1)
        p = Panel(out, (i % cols) * W, legend_h + (i // cols) * H,
                  "decode, Nq 1, GQA 32/8, d128: TB/s", shapes, math.ceil(top), "B x Nk",
                  categorical=True)
        colors = {k: c for k, _, c in PROVIDERS}
        keys = [k for k in series if k in colors]
        for j, key in enumerate(keys):
            for shape, v in series[key]:
                p.bar(shape, j, len(keys), v, colors[key])
        p.close()
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench", help="bench.py --json output")
    ap.add_argument("--decode", default=None, help="decode.py --json output")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    with open(args.bench) as f:
        bench = json.load(f)
    decode = None
    if args.decode:
        with open(args.decode) as f:
            decode = json.load(f)
    with open(args.output, "w") as f:
        f.write(render(bench, decode))
    return 0


if __name__ == "__main__":
    sys.exit(main())
