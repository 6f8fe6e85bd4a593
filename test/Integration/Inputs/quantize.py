"""Inputs for quantize.test and an independent pure-Python reading of
attn.quantize (PyTorch's rounding: x / factor in f32, clamped to +-448,
nearest e4m3 value, ties to the even code) and attn.hadamard."""
import math
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(__file__))
from npy import load, save  # noqa: E402


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def e4m3(code):
    """The value of the positive e4m3 code 0..0x7E."""
    e, m = code >> 3, code & 7
    return m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)


GRID = [e4m3(c) for c in range(0x7F)]


def round_e4m3(v):
    a = abs(v)
    hi = next(c for c in range(0x7F) if GRID[c] >= a)
    lo = max(hi - 1, 0)
    if GRID[hi] - a < a - GRID[lo] or (GRID[hi] - a == a - GRID[lo] and hi % 2 == 0):
        code = hi
    else:
        code = lo
    return math.copysign(GRID[code], v)


def quantize(x, factor):
    return round_e4m3(max(-448.0, min(448.0, f32(x / factor))))


def factor_of(values):
    amax = max(abs(v) for v in values)
    return f32(amax / 448.0) if amax > 0 else 1.0


def inputs():
    """[1, 2, 70, 8]: head 0 holds every e4m3 value and every midpoint
    (ties) between neighbours at a factor of 1/2 (its amax 224), random
    values and zeros; head 1's first block is all zeros (factor 1), its
    second block small values (subnormal codes after scaling)."""
    grid = GRID[:0x7F]
    head0 = [g / 2 for g in grid] + [(a + b) / 4 for a, b in zip(grid, grid[1:])]
    head0 += [-v for v in head0[:40]] + [0.0, -0.0]
    seed = 12345
    while len(head0) < 70 * 8:
        seed = (seed * 1103515245 + 12345) % 2 ** 31
        head0.append((seed / 2 ** 31 - 0.5) * 300)
    head1 = [0.0] * (64 * 8) + [(i - 20) * 1e-3 for i in range(6 * 8)]
    return [f32(v) for v in head0 + head1]


def make(d):
    save(os.path.join(d, "x.npy"), (1, 2, 70, 8), inputs())
    save(os.path.join(d, "r.npy"), (3, 24), [f32(math.sin(i) * (i % 7)) for i in range(72)])


def check(d):
    x = inputs()
    bad = []

    def expect(name, got, want, exact=True):
        for i, (g, w) in enumerate(zip(got, want)):
            same = (g == w and math.copysign(1, g) == math.copysign(1, w)) if exact else \
                abs(g - w) <= 1e-6 * max(1.0, abs(w))
            if not same:
                bad.append("%s[%d]: got %r, want %r" % (name, i, g, w))
                return

    g = factor_of(x)
    expect("group factor", load(os.path.join(d, "g.npy"))[1], [g])
    expect("group x8", load(os.path.join(d, "g8.npy"))[1], [quantize(v, g) for v in x])
    rows = 8
    factors, codes = [], []
    for head in range(2):
        for block in range(2):
            lo, hi = (head * 70 + block * 64) * rows, (head * 70 + min(70, block * 64 + 64)) * rows
            f = factor_of(x[lo:hi])
            factors.append(f)
            codes += [quantize(v, f) for v in x[lo:hi]]
    expect("block factors", load(os.path.join(d, "b.npy"))[1], factors)
    expect("block x8", load(os.path.join(d, "b8.npy"))[1], codes)
    r = load(os.path.join(d, "r.npy"))[1]
    want = []
    for row in range(3):
        for j in range(24):  # groups of 8 columns
            base = row * 24 + j // 8 * 8
            s = sum((-1) ** bin((j % 8) & k).count("1") * r[base + k] for k in range(8))
            want.append(s / math.sqrt(8))
    expect("hadamard", load(os.path.join(d, "rr.npy"))[1], want, exact=False)
    print("\n".join(bad) if bad else "OK")


if __name__ == "__main__":
    {"make": make, "check": check}[sys.argv[1]](sys.argv[2])
