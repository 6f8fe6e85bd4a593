#!/usr/bin/env python3
"""Run-time window kernels against compile-time ones: for every kernel of the
--exact bundle compiled for one window (l, r), the run-time window kernel
of the same direction, dtype, head dim and instructions in --bundle is bound
to the same window (fa_kernel_find's view) and both are launched on the same
tensors in one process, alternating rounds of R launches timed with CUDA
events; the median of the rounds' ratios is printed (goal: within 2%).

Built on the development machine:
    build/bin/fa-aot --config-file test/gpu/configs_window.txt -o out/bundle-window
    build/bin/fa-aot --config-file test/gpu/configs_window_exact.txt -o out/bundle-window-exact
    python3 bench/window.py --bundle out/bundle-window --exact out/bundle-window-exact
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import fa  # noqa: E402
from fa import _tensor  # noqa: E402
from fa._runtime import BackwardArgs, ForwardArgs  # noqa: E402
from sinks import timed  # noqa: E402 (CUDA-event time of R launches)

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def exact_kernels(b):
    """(handle, info) of every compile-time window kernel of bundle b."""
    handle = b._handles[0]
    out = []
    for i in range(b.lib.fa_bundle_kernel_count(handle)):
        k = b.lib.fa_bundle_kernel_at(handle, i)
        info = b._info(k)
        if info["mask"] == "window" and info["window_left"] >= 0 and not info["split_kv"] \
                and not info["varlen"]:
            out.append((k, info))
    return out


def launcher(b, kernel, info, tensors, scale):
    lib = b.lib
    stream = torch.cuda.current_stream().cuda_stream

    def check(status):
        if status:
            raise fa.FaError(status, lib.fa_last_error().decode())
    if info["direction"] == "fwd":
        args = ForwardArgs(*[_tensor(t) for t in tensors[:5]], scale)
        return lambda: check(lib.fa_attention_forward(kernel, ctypes.byref(args), stream))
    args = BackwardArgs(*[_tensor(t) for t in tensors], scale)
    return lambda: check(lib.fa_attention_backward(kernel, ctypes.byref(args), stream))


def tensors_for(info, batch, heads, n):
    dev, dt = torch.device("cuda"), DTYPES[info["dtype"]]
    d, dv = info["head_dim"], info["head_dim_v"]
    q = torch.randn(batch, heads, n, d, device=dev, dtype=dt)
    k = torch.randn(batch, heads, n, d, device=dev, dtype=dt)
    v = torch.randn(batch, heads, n, dv, device=dev, dtype=dt)
    o = torch.randn(batch, heads, n, dv, device=dev, dtype=dt)
    lse = torch.zeros(batch, heads, n, device=dev)
    if info["direction"] == "fwd":
        return [q, k, v, o, lse]
    do = torch.randn_like(o)
    grads = [torch.empty_like(t) for t in (q, k, v)]
    return [q, k, v, o, do, lse] + grads + [torch.empty(batch, heads, n, device=dev),
                                            torch.empty(batch, heads, n, d, device=dev)]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True, help="the run-time window kernels")
    ap.add_argument("--exact", required=True, help="their compile-time twins")
    ap.add_argument("--lib", default=None)
    ap.add_argument("--n", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--tokens", type=int, default=32768, help="batch = tokens / n")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rt_bundle = fa.load(args.bundle, args.lib)
    exact_bundle = fa.load(args.exact, args.lib)
    rows = []
    for exact, info in exact_kernels(exact_bundle):
        window = (info["window_left"], info["window_right"])
        view = rt_bundle.find(0 if info["direction"] == "fwd" else 1, info["dtype"],
                              info["head_dim"], info["head_dim_v"], "window", window, 90,
                              mma=info["mma"])
        got = rt_bundle._info(view)
        if got["window_left"] != window[0] or "_rt_" not in got["tag"]:
            print("skip %s: %s is not a run-time window kernel" % (info["tag"], got["tag"]))
            continue
        for n in args.n:
            batch = max(1, args.tokens // n)
            t = tensors_for(info, batch, args.heads, n)
            scale = 1 / math.sqrt(info["head_dim"])
            fe = launcher(exact_bundle, exact, info, t, scale)
            fr = launcher(rt_bundle, view, info, t, scale)
            fe(), fr()
            torch.cuda.synchronize()
            te, tr, ratios = [], [], []
            for _ in range(args.rounds):
                a, c = timed(fe, args.reps), timed(fr, args.reps)
                te.append(a), tr.append(c), ratios.append(c / a)
            row = {"direction": info["direction"], "d": info["head_dim"], "window": window,
                   "batch": batch, "n": n, "exact_ms": statistics.median(te),
                   "runtime_ms": statistics.median(tr), "ratio": statistics.median(ratios),
                   "exact": info["tag"], "runtime": got["tag"]}
            rows.append(row)
            print("%s d%d window (%d, %d) %dx%d: exact %.3f ms, run-time %.3f ms, "
                  "run-time/exact %.3f" % (row["direction"], row["d"], window[0], window[1],
                                           batch, n, row["exact_ms"], row["runtime_ms"],
                                           row["ratio"]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
