#!/usr/bin/env python3
"""Host overhead of tiny attention calls: fa next to PyTorch SDPA, same process.

For each tiny shape (bf16, B1 H8 N128, d 64 and 128, no mask and causal):
  fwd        o = attention(q, k, v) under no_grad
  fwd+bwd    o = attention(q, k, v) with q, k, v requiring grad; o.backward(do)
  fa.forward_into (preallocated O and LSE: the launch path alone)
µs per call = wall time of `--calls` back-to-back calls with one synchronize at
the end, median of `--rounds` interleaved rounds; at these sizes the GPU work
is a few µs, so this is the host's cost per call. `gpu µs` is the same calls
timed with CUDA events around one synchronised call (kernel time + launch
latency), to show where the GPU, not the host, is the bound.
--profile prints cProfile's top entries for fa's forward and forward+backward
(where the host time goes inside fa).

    python3 bench/overhead.py --bundle out/bundle --lib <libfa_runtime.so> [--json out.json]
"""
import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fa  # noqa: E402


def per_call_us(fn, calls):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def gpu_us(fn, reps=50):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3)
    return statistics.median(samples)


def callables(shape, causal):
    b, h, n, d = shape
    mk = lambda grad=False: torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16,  # noqa
                                        requires_grad=grad)
    q, k, v = mk(), mk(), mk()
    qg, kg, vg = mk(True), mk(True), mk(True)
    do = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)
    o = torch.empty_like(q)
    lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)

    def fa_fwd():
        with torch.no_grad():
            fa.attention(q, k, v, causal=causal)

    def sdpa_fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def fa_fwd_bwd():
        fa.attention(qg, kg, vg, causal=causal).backward(do)

    def sdpa_fwd_bwd():
        F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal).backward(do)

    def fa_into():
        fa.forward_into(q, k, v, o, lse, causal=causal)

    return {"fa fwd": fa_fwd, "sdpa fwd": sdpa_fwd, "fa fwd+bwd": fa_fwd_bwd,
            "sdpa fwd+bwd": sdpa_fwd_bwd, "fa forward_into": fa_into}


def profile(fn, calls, top):
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.zeros(1, device="cuda")
    fa.load(args.bundle, args.lib)
    print("torch %s, %s" % (torch.__version__, torch.cuda.get_device_name()))
    rows = []
    for d in [int(x) for x in args.dims.split(",")]:
        for causal in (False, True):
            shape = (1, 8, 128, d)
            fns = callables(shape, causal)
            for fn in fns.values():  # warm-up: kernel loads, plans, autotuning
                for _ in range(5):
                    fn()
            samples = {name: [] for name in fns}
            for _ in range(args.rounds):
                for name, fn in fns.items():
                    samples[name].append(per_call_us(fn, args.calls))
            row = {"shape": "B1 H8 N128 d%d" % d, "causal": causal}
            for name, fn in fns.items():
                row[name] = statistics.median(samples[name])
                row[name + " gpu"] = gpu_us(fn)
            rows.append(row)
            print("%s %-6s  fwd: fa %6.1f µs  sdpa %6.1f µs (fa gpu %5.1f, sdpa gpu %5.1f) | "
                  "fwd+bwd: fa %6.1f µs  sdpa %6.1f µs (fa gpu %5.1f, sdpa gpu %5.1f) | "
                  "forward_into %5.1f µs" % (
                      row["shape"], "causal" if causal else "none", row["fa fwd"],
                      row["sdpa fwd"], row["fa fwd gpu"], row["sdpa fwd gpu"],
                      row["fa fwd+bwd"], row["sdpa fwd+bwd"], row["fa fwd+bwd gpu"],
                      row["sdpa fwd+bwd gpu"], row["fa forward_into"]))
            if args.profile and d == 64 and not causal:
                for name in ("fa fwd", "fa fwd+bwd"):
                    print("--- cProfile of %d calls of %s (tottime)" % (args.calls, name))
                    print(profile(fns[name], args.calls, 14))
    worst = max(max(r["fa fwd"] / r["sdpa fwd"], r["fa fwd+bwd"] / r["sdpa fwd+bwd"])
                for r in rows)
    print("RESULT: fa/SDPA host time per call, worst ratio %.2f (goal <= 1.00)" % worst)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
