"""Partial results for attn.merge with the edge cases of split-KV (empty
partials, an all-empty row, LSEs far apart) and a float64 check of fa-run's
merged O and LSE."""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from npy import load, save  # noqa: E402

S, B, H, N, D = 3, 1, 2, 4, 2
INF = float("inf")
NAN = float("nan")


def partials():
    """LSE and O per (s, h, i): row (h, i) cases, in order of i."""
    lse = [[[0.0] * N for _ in range(H)] for _ in range(S)]
    o = [[[[0.0] * D for _ in range(N)] for _ in range(H)] for _ in range(S)]
    for s in range(S):
        for h in range(H):
            for i in range(N):
                lse[s][h][i] = 0.5 * s - 0.25 * h + 0.1 * i
                o[s][h][i] = [1.0 + s + 0.5 * h, -2.0 + i - s]
    for h in range(H):
        # i = 1: the middle partial saw no key; its O is garbage (NaN) and
        # must not reach the result.
        lse[1][h][1] = -INF
        o[1][h][1] = [NAN, NAN]
        # i = 2: no partial saw a key: O = 0, LSE = -inf, never NaN.
        for s in range(S):
            lse[s][h][2] = -INF
            o[s][h][2] = [0.0, 0.0]
        # i = 3: LSEs 120 apart: the small one must underflow to nothing,
        # not overflow.
        lse[0][h][3] = 100.0
        lse[2][h][3] = -20.0
    return lse, o


def reference(lse, o):
    outs, lses = [], []
    for h in range(H):
        for i in range(N):
            m = max(lse[s][h][i] for s in range(S))
            if m == -INF:
                outs.append([0.0] * D)
                lses.append(-INF)
                continue
            w = [0.0 if lse[s][h][i] == -INF else math.exp(lse[s][h][i] - m) for s in range(S)]
            total = sum(w)
            outs.append([sum(w[s] * o[s][h][i][e] for s in range(S) if w[s]) / total
                         for e in range(D)])
            lses.append(m + math.log(total))
    return outs, lses


def main():
    mode, d = sys.argv[1], sys.argv[2]
    lse, o = partials()
    if mode == "make":
        save(os.path.join(d, "parts.npy"), (S, B, H, N, D),
             [x for s in o for h in s for row in h for x in row])
        save(os.path.join(d, "part_lse.npy"), (S, B, H, N),
             [x for s in lse for h in s for x in h])
        return
    _, got_o = load(os.path.join(d, "o.npy"))
    _, got_lse = load(os.path.join(d, "lse.npy"))
    want_o, want_lse = reference(lse, o)
    worst = 0.0
    for r in range(H * N):
        if math.isnan(got_lse[r]) or (math.isinf(want_lse[r]) != math.isinf(got_lse[r])):
            print("row %d: LSE %r, expected %r" % (r, got_lse[r], want_lse[r]))
            return
        if not math.isinf(want_lse[r]):
            worst = max(worst, abs(got_lse[r] - want_lse[r]) / max(1.0, abs(want_lse[r])))
        for e in range(D):
            g = got_o[r * D + e]
            if math.isnan(g):
                print("row %d: O is NaN" % r)
                return
            worst = max(worst, abs(g - want_o[r][e]))
    # f32 arithmetic on values of order 1..100: a few ulps.
    print("merge max error %.3g" % worst)
    print("OK" if worst < 1e-5 else "FAIL")


main()
