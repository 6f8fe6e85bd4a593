#!/usr/bin/env python3
"""TFLOP/s of fa's fp8 e4m3 forward (issue 19) next to fa's bf16 forward
and PyTorch SDPA (cuDNN, flash) in one process, with bench.py's interleaved
CUDA-event timing: B*N = 64k tokens, hidden 2048 (H = 2048/d), d in
{128, 256} (--dims), N in {1k, 2k, 4k, 8k, 16k}, causal off and on. FLOPs
as bench.py: 4*B*H*N^2*d forward, half when causal. The fp8 call is fa.forward_fp8_into (preallocated O and LSE, the
runtime's fa_attention_forward_fp8), the bf16 one fa.forward_into. With
--block the bundle's block-descale kernels (descale_block 64, config field
blockscale: descale_q [B,H,N/64], descale_k [B,H,N/64]) run beside the
per-head ones, column fa:fp8-bs64 and the ratio bs64/fp8. With --quantize
each row also times the quantisation of the bf16 q, k, v in PyTorch ops and,
where the bundle has a quantiser for bf16 (quant=bf16), on the GPU
(fa.quantize_fp8, fa_quantize), plain and with rotate=True (incoherent
processing), against the fp8 forward; the GPU's as the bytes it moves per
second (each input read twice, e4m3 written once).

SDPA's cuDNN backend in this PyTorch takes no float8 inputs (it is tried
and its error shown once), so the baselines are bf16 cuDNN and flash. The
issue's target: fp8 >= 1000 TFLOP/s at N >= 8k.

    python3 bench/fp8.py --bundle out/bundle-fp8 --bf16-bundle out/bundle --lib LIB
        [--dims 128,256] [--seqs 8192,16384] [--json out.json] [--ab NAME=BUNDLE ...] [--block]
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from bench import time_interleaved  # noqa: E402

FP8 = torch.float8_e4m3fn


def sdpa(backend, q, k, v, causal):
    def run():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def row(bundle, bf16_bundle, B, H, N, d, causal, ab=(), block=False, quantize=False):
    dev = "cuda"
    q = torch.randn(B, H, N, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(B, H, N, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(B, H, N, d, device=dev, dtype=torch.bfloat16)
    q8, k8, v8 = (t.to(FP8) for t in (q, k, v))
    ones = torch.ones(B, H, device=dev)
    o8 = torch.empty(B, H, N, d, device=dev, dtype=torch.bfloat16)
    lse = torch.empty(B, H, N, device=dev)
    o = torch.empty_like(o8)
    fns = {}
    try:
        fa.forward_fp8_into(q8, k8, v8, o8, lse, (ones, ones, ones), causal=causal,
                            bundle=bundle)
        fns["fa:fp8"] = lambda: fa.forward_fp8_into(q8, k8, v8, o8, lse, (ones, ones, ones),
                                                    causal=causal, bundle=bundle)
    except fa.FaError as e:
        fns["fa:fp8"] = {"error": str(e).splitlines()[0][:200]}
    if block:
        blocks = torch.ones(B, H, -(-N // fa.DESCALE_BLOCK), device=dev)
        block_scales = (blocks, blocks, ones)
        try:
            fa.forward_fp8_into(q8, k8, v8, o8, lse, block_scales, causal=causal, bundle=bundle)
            fns["fa:fp8-bs64"] = lambda: fa.forward_fp8_into(q8, k8, v8, o8, lse, block_scales,
                                                             causal=causal, bundle=bundle)
        except fa.FaError as e:
            fns["fa:fp8-bs64"] = {"error": str(e).splitlines()[0][:200]}
    # With --block the variants are timed with block descales (their bundle's
    # block kernels), else per head.
    ab_scales = block_scales if block else (ones, ones, ones)
    for name, other in ab:
        fns["fa:" + name] = (lambda other=other: fa.forward_fp8_into(
            q8, k8, v8, o8, lse, ab_scales, causal=causal, bundle=other))
    if bf16_bundle is not None:
        try:
            fa.forward_into(q, k, v, o, lse, causal=causal, bundle=bf16_bundle)
            fns["fa:bf16"] = lambda: fa.forward_into(q, k, v, o, lse, causal=causal,
                                                     bundle=bf16_bundle)
        except fa.FaError as e:
            fns["fa:bf16"] = {"error": str(e).splitlines()[0][:200]}
    if quantize:
        # PyTorch's ops, and the bundle's quantiser where it has one.
        fns["quantize"] = lambda: fa._quantize_fp8_torch(q, k, v, False, False)
        fns["quantize:rot"] = lambda: fa._quantize_fp8_torch(q, k, v, False, True)
        if bundle._find_quantizer(q.dtype, d) is not None:
            fns["quantize:gpu"] = lambda: fa.quantize_fp8(q, k, v, bundle=bundle)
            fns["quantize:gpu-rot"] = lambda: fa.quantize_fp8(q, k, v, rotate=True,
                                                              bundle=bundle)
    fns["cudnn:fp8"] = sdpa(SDPBackend.CUDNN_ATTENTION, q8, k8, v8, causal)
    fns["cudnn:bf16"] = sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v, causal)
    fns["flash:bf16"] = sdpa(SDPBackend.FLASH_ATTENTION, q, k, v, causal)
    times = time_interleaved(fns, runs=15, budget_ms=400)
    flops = 4.0 * B * H * N * N * d * (0.5 if causal else 1.0)
    out = {}
    for name, t in times.items():
        out[name] = ({"tflops": flops / (t["ms"] * 1e-3) / 1e12, "ms": t["ms"]}
                     if "ms" in t else t)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True, help="the fp8 bundle")
    ap.add_argument("--bf16-bundle", default=None,
                    help="a bundle with the bf16 wgmma forwards of --dims")
    ap.add_argument("--dims", default="128", help="head dims (128, 256)")
    ap.add_argument("--lib", default=None)
    ap.add_argument("--seqs", default="1024,2048,4096,8192,16384")
    ap.add_argument("--json", default=None)
    ap.add_argument("--ab", action="append", default=[], metavar="NAME=PATH",
                    help="another fp8 bundle timed in the same process (column fa:NAME)")
    ap.add_argument("--quantize", action="store_true",
                    help="also time fa.quantize_fp8, plain and with rotate=True")
    ap.add_argument("--block", action="store_true",
                    help="also time the bundle's block-descale kernels (column fa:fp8-bs64)")
    args = ap.parse_args()
    bundle = fa.load(args.bundle, args.lib, jit=False)
    bf16 = fa.Bundle(args.bf16_bundle, args.lib, False, None) if args.bf16_bundle else None
    tokens = 65536
    ab = []
    for spec in args.ab:
        name, _, path = spec.partition("=")
        ab.append((name, fa.Bundle(path, args.lib, False, None)))
    results = []
    cols = (["fa:fp8"] + (["fa:fp8-bs64"] if args.block else []) + ["fa:" + name for name, _ in ab]
            + ["fa:bf16", "cudnn:fp8", "cudnn:bf16", "flash:bf16"])
    print("%-4s %-7s %-6s " % ("d", "N", "causal") + " ".join("%12s" % c for c in cols) +
          "  fp8/cudnn" + ("  bs64/fp8" if args.block else ""))
    errors = {}
    grid = [(d, causal, int(n)) for d in (int(x) for x in args.dims.split(","))
            for causal in (False, True) for n in args.seqs.split(",")]
    for d, causal, N in grid:
        H, B = 2048 // d, max(1, tokens // N)
        r = row(bundle, bf16, B, H, N, d, causal, ab, args.block, args.quantize)
        cells = []
        for c in cols:
            if "tflops" in r.get(c, {}):
                cells.append("%12.0f" % r[c]["tflops"])
            else:
                cells.append("%12s" % "-")
                errors.setdefault(c, r.get(c, {}).get("error", "not run"))
        def ratio(a, b):
            return (r[a]["tflops"] / r[b]["tflops"]
                    if "tflops" in r.get(a, {}) and "tflops" in r.get(b, {}) else math.nan)
        print("%-4d %-7d %-6s " % (d, N, causal) + " ".join(cells) +
              "  %.2f" % ratio("fa:fp8", "cudnn:bf16") +
              ("  %9.2f" % ratio("fa:fp8-bs64", "fa:fp8") if args.block else ""))
        if args.quantize and all("ms" in r.get(c, {}) for c in ("quantize", "quantize:rot", "fa:fp8")):
            fwd = r["fa:fp8"]["ms"]
            print("     quantize_fp8 in PyTorch %.3f ms (%.2fx the fp8 forward), rotate=True "
                  "%.3f ms (%.2fx)" % (r["quantize"]["ms"], r["quantize"]["ms"] / fwd,
                                       r["quantize:rot"]["ms"], r["quantize:rot"]["ms"] / fwd))
            if all("ms" in r.get(c, {}) for c in ("quantize:gpu", "quantize:gpu-rot")):
                # q, k, v read twice in bf16 (2 B), written once in e4m3.
                moved = 3 * (2 * 2 + 1) * B * H * N * d
                print("     quantize_fp8 on the GPU %.3f ms (%.2fx, %.2f TB/s), rotate=True "
                      "%.3f ms (%.2fx)"
                      % (r["quantize:gpu"]["ms"], r["quantize:gpu"]["ms"] / fwd,
                         moved / r["quantize:gpu"]["ms"] / 1e9, r["quantize:gpu-rot"]["ms"],
                         r["quantize:gpu-rot"]["ms"] / fwd))
        results.append({"N": N, "B": B, "H": H, "d": d, "causal": causal, **r})
    for c, e in errors.items():
        print("%s: %s" % (c, e))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
