#!/usr/bin/env python3
"""Differential test of the fp8 e4m3 backward (issue 19) on the GPU, through
fa.backward_fp8_into and the runtime (fa_attention_backward_fp8).

Each case draws float32 Q, K, V and dO, quantises Q, K, V with
fa.quantize_fp8 (one factor per (batch, key head)) and dO the same way,
runs the fp8 forward (O in bf16, LSE) and the fp8 backward, and compares dQ,
dK, dV with the float64 gradients of the unquantised inputs. The rule (as
the flash-attn suite): fa's max error <= 2x that of a naive fp8 reference
(the same quantised inputs dequantised, float32 math, Delta from the O the
backward is given, as fa's) + 1e-5. Cases
(--cases per mask): GQA groups 1, 4 and 8, ragged Nq and Nk (1 ... 2k),
input magnitudes 1 and 8. Also: the fp8 backward refuses a wrong descale
shape. bench/fp8_backward.py times it.

Bundle (built on the development machine):
    build/bin/fa-aot --config-file test/gpu/configs_fp8_bwd.txt -o out/bundle-fp8-bwd
On the GPU machine:
    python3 test/gpu/test_fp8_backward.py --bundle out/bundle-fp8-bwd \\
        --lib build-rt/lib/libfa_runtime.so
Exits 1 if anything failed.
"""
import argparse
import math
import os
import random
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import fa  # noqa: E402

FP8 = torch.float8_e4m3fn


def quantise_per_key_head(x, hkv):
    """x [B, H, N, D] (float32) to e4m3 with one factor per (batch, key head):
    amax / 448 over the heads of the group (1 where amax is 0)."""
    B, H = x.shape[0], x.shape[1]
    amax = x.abs().reshape(B, hkv, -1).amax(dim=2)
    descale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    per_head = descale.repeat_interleave(H // hkv, dim=1)[:, :, None, None]
    x8 = (x / per_head).clamp(-448, 448).to(FP8)
    return x8, descale.float().contiguous()


def dequantise(x8, descale):
    H = x8.shape[1]
    per_head = descale.repeat_interleave(H // descale.shape[1], dim=1)[:, :, None, None]
    return x8.float() * per_head


def probabilities(q, k, causal, scale):
    """softmax(Q·Kᵀ·scale) (K shared by groups of query heads; causal top-left)
    and the group size."""
    g = q.shape[1] // k.shape[1]
    s = torch.matmul(q, k.repeat_interleave(g, dim=1).transpose(-1, -2)) * scale
    if causal:
        nq, nk = s.shape[-2], s.shape[-1]
        keep = torch.ones(nq, nk, dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, dim=-1).nan_to_num(0.0), g


def reference_grads(q, k, v, do, causal, scale, dtype):
    """dQ, dK, dV of softmax(Q·Kᵀ·scale)·V by autograd in `dtype`."""
    q, k, v, do = [t.to(dtype).detach().requires_grad_(True) for t in (q, k, v)] + \
        [do.to(dtype)]
    p, g = probabilities(q, k, causal, scale)
    o = torch.matmul(p, v.repeat_interleave(g, dim=1))
    o.backward(do)
    return q.grad, k.grad, v.grad


def naive_grads(q, k, v, do, o, causal, scale):
    """The naive fp8 baseline: float32 math on the dequantised inputs, Delta
    from the O the backward is given (the fp8 forward's, bf16), as fa's."""
    p, g = probabilities(q, k, causal, scale)
    kk, vv = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    dp = torch.matmul(do, vv.transpose(-1, -2))
    delta = (do * o.float()).sum(-1, keepdim=True)
    ds = p * (dp - delta)
    dq = torch.matmul(ds, kk) * scale
    dk = torch.matmul(ds.transpose(-1, -2), q) * scale
    dv = torch.matmul(p.transpose(-1, -2), do)
    B, H, nk, d = dk.shape
    fold = lambda t: t.reshape(B, H // g, g, nk, t.shape[-1]).sum(2)  # noqa: E731
    return dq, fold(dk), fold(dv)


def run_case(bundle, B, H, hkv, nq, nk, causal, magnitude, gen):
    dev = "cuda"
    d = 128
    q = torch.randn(B, H, nq, d, generator=gen, device=dev) * magnitude
    k = torch.randn(B, hkv, nk, d, generator=gen, device=dev) * magnitude
    v = torch.randn(B, hkv, nk, d, generator=gen, device=dev)
    do = torch.randn(B, H, nq, d, generator=gen, device=dev)
    q8, k8, v8, sq, sk, sv = fa.quantize_fp8(q, k, v)
    do8, sdo = quantise_per_key_head(do, hkv)
    o = torch.empty(B, H, nq, d, dtype=torch.bfloat16, device=dev)
    lse = torch.empty(B, H, nq, dtype=torch.float32, device=dev)
    fa.forward_fp8_into(q8, k8, v8, o, lse, (sq, sk, sv), causal=causal, bundle=bundle)
    dq = torch.empty(B, H, nq, d, dtype=torch.bfloat16, device=dev)
    dk = torch.empty(B, hkv, nk, d, dtype=torch.bfloat16, device=dev)
    dv = torch.empty(B, hkv, nk, d, dtype=torch.bfloat16, device=dev)
    fa.backward_fp8_into(q8, k8, v8, o, do8, lse, dq, dk, dv, (sq, sk, sv, sdo),
                         causal=causal, bundle=bundle)
    torch.cuda.synchronize()
    scale = 1.0 / math.sqrt(d)
    exact = reference_grads(q, k, v, do, causal, scale, torch.float64)
    naive = naive_grads(dequantise(q8, sq), dequantise(k8, sk), dequantise(v8, sv),
                        dequantise(do8, sdo), o, causal, scale)
    errors = []
    ok = True
    for name, got, ref, base in zip(("dQ", "dK", "dV"), (dq, dk, dv), exact, naive):
        e = (got.double() - ref).abs().max().item()
        n = (base.double() - ref).abs().max().item()
        good = math.isfinite(e) and e <= 2 * n + 1e-5
        ok &= good
        errors.append("%s err %.3g (naive %.3g)%s" % (name, e, n, "" if good else " FAIL"))
    return ok, ", ".join(errors)


def refusals(bundle):
    """The plain backward refuses the fp8 kernel; a wrong descale shape is
    refused with the values involved."""
    dev = "cuda"
    B, H, N, d = 1, 2, 128, 128
    x8 = torch.zeros(B, H, N, d, device=dev).to(FP8)
    o = torch.zeros(B, H, N, d, dtype=torch.bfloat16, device=dev)
    lse = torch.zeros(B, H, N, device=dev)
    g = [torch.empty(B, H, N, d, dtype=torch.bfloat16, device=dev) for _ in range(3)]
    ones = torch.ones(B, H, device=dev)
    failures = 0
    try:
        fa.backward_fp8_into(x8, x8, x8, o, x8, lse, *g,
                             (ones, ones, ones, torch.ones(B, 2 * H, device=dev)),
                             bundle=bundle)
        print("FAIL refusal: descale_do of shape [1, 4] accepted")
        failures += 1
    except fa.FaError as e:
        print("ok refusal: descale_do [1, 4]:", e)
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib")
    ap.add_argument("--cases", type=int, default=12)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    bundle = fa.load(args.bundle, args.lib, jit=False)
    rng = random.Random(args.seed)
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    failed = total = 0
    for causal in (False, True):
        for _ in range(args.cases):
            B = rng.choice([1, 2])
            hkv = rng.choice([1, 2])
            H = hkv * rng.choice([1, 4, 8])
            nq, nk = rng.choice([1, 64, 100, 128, 333, 1024, 2048]), \
                rng.choice([1, 64, 128, 200, 512, 1500, 2048])
            if causal:
                nk = nq  # top-left causal over a square problem
            magnitude = rng.choice([1.0, 8.0])
            ok, what = run_case(bundle, B, H, hkv, nq, nk, causal, magnitude, gen)
            total += 1
            failed += not ok
            print("%s %s B%d H%d/%d Nq%d Nk%d x%g: %s" % (
                "ok" if ok else "FAIL", "causal" if causal else "none", B, H, hkv, nq, nk,
                magnitude, what))
    failed += refusals(bundle)
    print("fp8 backward: %d cases, %d failed" % (total, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
