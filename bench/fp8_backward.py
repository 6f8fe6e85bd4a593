#!/usr/bin/env python3
"""TFLOP/s of fa's fp8 e4m3 backward (issue 19) next to fa's bf16 wgmma
backward and PyTorch SDPA's bf16 backward (cuDNN, flash) in one process,
with bench.py's interleaved CUDA-event timing: B*N = 64k tokens, d 128, H 16,
N in {2k, 4k, 8k, 16k} (--seqs), causal off and on. FLOPs as bench.py: 2.5
times the forward's 4*B*H*N^2*d, half when causal. The fp8 call is
fa.backward_fp8_into (Q, K, V quantised per key head by fa.quantize_fp8, dO
the same way, O and LSE from the fp8 forward), the bf16 one fa.backward_into
on the same values in bf16; SDPA runs its backward through autograd (the
forward's time subtracted: its own forward timed alone).

    python3 bench/fp8_backward.py --bundle out/bundle-fp8-bwd --bf16-bundle out/bundle --lib LIB
        [--seqs 4096,8192] [--json out.json]
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "test", "gpu"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from bench import time_interleaved  # noqa: E402
from test_fp8_backward import quantise_per_key_head  # noqa: E402


def sdpa_backward(backend, q, k, v, do, causal):
    """The backward of SDPA `backend` alone: forward + backward, then the
    forward alone, timed by the caller as a pair."""
    qg, kg, vg = [t.detach().requires_grad_(True) for t in (q, k, v)]

    def both():
        with sdpa_kernel(backend):
            F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal).backward(do)

    def forward():
        with torch.no_grad(), sdpa_kernel(backend):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return both, forward


def row(bundle, bf16, n, causal, d=128, H=16, tokens=65536):
    dev = "cuda"
    B = max(1, tokens // n)
    q = torch.randn(B, H, n, d, device=dev)
    k, v, do = torch.randn_like(q), torch.randn_like(q), torch.randn_like(q)
    q8, k8, v8, sq, sk, sv = fa.quantize_fp8(q, k, v)
    do8, sdo = quantise_per_key_head(do, H)
    o = torch.empty(B, H, n, d, dtype=torch.bfloat16, device=dev)
    lse = torch.empty(B, H, n, device=dev)
    fa.forward_fp8_into(q8, k8, v8, o, lse, (sq, sk, sv), causal=causal, bundle=bundle)
    g = [torch.empty(B, H, n, d, dtype=torch.bfloat16, device=dev) for _ in range(3)]
    ws = (torch.empty(B, H, n, device=dev), torch.empty(B, H, n, d, device=dev))
    fns = {"fa:fp8": lambda: fa.backward_fp8_into(
        q8, k8, v8, o, do8, lse, *g, (sq, sk, sv, sdo), *ws, causal=causal, bundle=bundle)}
    qb, kb, vb, dob = [t.bfloat16() for t in (q, k, v, do)]
    if bf16 is not None:
        fns["fa:bf16"] = lambda: fa.backward_into(qb, kb, vb, o, dob, lse, *g, *ws,
                                                  causal=causal, bundle=bf16, mma="wgmma")
    pairs = {}
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("flash", SDPBackend.FLASH_ATTENTION)):
        both, forward = sdpa_backward(backend, qb, kb, vb, dob, causal)
        fns[name + "+fwd"], fns[name + ":fwd"] = both, forward
        pairs[name] = (name + "+fwd", name + ":fwd")
    ms = time_interleaved(fns, runs=5, budget_ms=3000)
    for name, (both, forward) in pairs.items():
        if "ms" in ms.get(both, {}) and "ms" in ms.get(forward, {}):
            ms[name] = {"ms": ms[both]["ms"] - ms[forward]["ms"]}
    flops = 2.5 * 4 * B * H * n * n * d * (0.5 if causal else 1.0)
    keep = ["fa:fp8", "fa:bf16", *pairs]
    return {name: flops / ms[name]["ms"] / 1e9 for name in keep
            if "ms" in ms.get(name, {})}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--bf16-bundle")
    ap.add_argument("--lib")
    ap.add_argument("--seqs", default="2048,4096,8192,16384")
    ap.add_argument("--json")
    args = ap.parse_args()
    bundle = fa.load(args.bundle, args.lib, jit=False)
    bf16 = fa.load(args.bf16_bundle, args.lib, jit=False) if args.bf16_bundle else None
    results = []
    cols = ["fa:fp8", "fa:bf16", "cudnn", "flash"]
    print("%6s %7s " % ("N", "causal") + " ".join("%9s" % c for c in cols) + "  fp8/bf16")
    for n in [int(x) for x in args.seqs.split(",")]:
        for causal in (False, True):
            r = row(bundle, bf16, n, causal)
            results.append({"n": n, "causal": causal, "tflops": r})
            ratio = r["fa:fp8"] / r["fa:bf16"] if "fa:bf16" in r else float("nan")
            print("%6d %7s " % (n, causal) +
                  " ".join("%9.0f" % r[c] if c in r else "%9s" % "-" for c in cols) +
                  "  %.2f" % ratio)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
