#!/usr/bin/env python3
"""GPU time of each kernel a decode call launches (the split forward, the
merge) and the gaps between them, from torch.profiler's CUPTI records of
CUDA-graph replays: where a decode step's microseconds go.

    python3 bench/kernel_times.py --bundle out/bundle --lib <libfa_runtime.so>
"""
import argparse
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fa  # noqa: E402

# (B, H, Hkv, D, Nk): GQA 32/8 and one key head, launch-bound to full.
SHAPES = [(1, 32, 8, 128, 8192), (1, 8, 1, 64, 65536), (1, 8, 1, 128, 8192), (8, 8, 1, 128, 16384)]


def kernel_times(q, k, v, calls=20, replays=5):
    """{kernel name: median µs}, the median gap between kernels (µs) and the
    span per call (µs) of fa.attention(q, k, v) captured in a CUDA graph."""
    for _ in range(50):
        fa.attention(q, k, v)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fa.attention(q, k, v)
    for _ in range(20):
        graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                    key=lambda e: e.time_range.start)
    times = {}
    for e in events:
        times.setdefault(e.name, []).append(e.time_range.end - e.time_range.start)
    gaps = sorted(b.time_range.start - a.time_range.end for a, b in zip(events, events[1:]))
    span = (events[-1].time_range.end - events[0].time_range.start) / (calls * replays)
    median = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return {n: median(ts) for n, ts in times.items()}, median(gaps), span


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None)
    args = ap.parse_args()
    fa.load(args.bundle, args.lib, jit=False)
    for b, h, hkv, d, nk in SHAPES:
        q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, hkv, nk, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        times, gap, span = kernel_times(q, k, v)
        print("B%d H%d/%d d%d Nk%d: %.2f µs a call, gaps %.2f µs" % (b, h, hkv, d, nk, span, gap))
        for name, us in times.items():
            print("  %-72s %7.2f µs" % (name[:72], us))
    return 0


if __name__ == "__main__":
    sys.exit(main())
