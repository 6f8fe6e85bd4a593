#!/usr/bin/env python3
"""Differential test of the fp8 e4m3 forward (issue 19) on the GPU, through
fa.attention(q8, k8, v8, descale_q=, descale_k=, descale_v=) and the runtime
(fa_attention_forward_fp8).

Each case draws float32 Q, K, V, quantises them to float8_e4m3fn with one
descale factor per (batch, key head) (amax / 448, FA3's per-head scaling;
Q's factor spans the query heads of its key head) and compares fa's bf16 O
and f32 LSE with the float64 attention of the unquantised inputs. The rule
(DESIGN.md, as the flash-attn suite): fa's max error <= 2x that of a naive
fp8 reference (the same quantised inputs dequantised, float32 math) +
1e-5. Rows that see no key (causal_bottom_right with Nq > Nk) must give
O = 0 and LSE = -inf. Cases (--cases per mask and head dim, 36): each head
dim the bundle has (128, 256) with each of its masks, GQA groups 1, 4 and 8,
ragged Nq and Nk (1 ... 4k), input magnitudes 1 and 30. Also:
the runtime refuses wrong descale shapes and dtypes, the plain forward
refuses the fp8 kernel, and fa.attention refuses inputs that require grad.
Exits 1 if anything failed.

Bundle (built on the development machine):
    build/bin/fa-aot --config-file test/gpu/configs_fp8.txt -o out/bundle-fp8
On the GPU machine (scripts/device-run.sh with FA_FP8=1):
    python3 test/gpu/test_fp8.py --bundle out/bundle-fp8 --lib build-rt/lib/libfa_runtime.so
"""
import argparse
import math
import os
import random
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from test_attention import allowed_mask  # noqa: E402

FP8 = torch.float8_e4m3fn
MAX_E4M3 = 448.0


def quantise(x, group):
    """x [B, H, N, D] (float32) -> (e4m3 tensor, descale [B, H/group] f32,
    dequantised float32)."""
    B, H, N, D = x.shape
    blocks = x.reshape(B, H // group, group * N * D)
    descale = (blocks.abs().amax(-1) / MAX_E4M3).clamp_min(1e-12).float()
    scale = descale.repeat_interleave(group, dim=1)[:, :, None, None]
    x8 = (x / scale).clamp(-MAX_E4M3, MAX_E4M3).to(FP8)
    return x8, descale.contiguous(), x8.float() * scale


def attention(q, k, v, allowed, scale):
    """O and LSE in q's dtype's math; O = 0, LSE = -inf on rows with no key."""
    g = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    s = s.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse.unsqueeze(-1)).nan_to_num(0.0)
    return torch.matmul(p, v).nan_to_num(0.0), lse


def max_err(x, ref):
    """Max |x - ref| over finite entries; inf if the infinities differ."""
    x, ref = x.double(), ref.double()
    inf = torch.isinf(ref) | torch.isinf(x)
    if (x[inf] != ref[inf]).any() or torch.isnan(x).any():
        return math.inf
    d = (x - ref).abs()
    d[inf] = 0
    return d.max().item() if d.numel() else 0.0


def check_case(bundle, mask, d, B, H, Hkv, Nq, Nk, magnitude, seed):
    torch.manual_seed(seed)
    dev = "cuda"
    q = torch.randn(B, H, Nq, d, device=dev) * magnitude
    k = torch.randn(B, Hkv, Nk, d, device=dev) * magnitude
    v = torch.randn(B, Hkv, Nk, d, device=dev)
    q8, dq, qd = quantise(q, H // Hkv)
    k8, dk, kd = quantise(k, 1)
    v8, dv, vd = quantise(v, 1)
    scale = 1.0 / math.sqrt(d)
    allowed = allowed_mask(mask, None, Nq, Nk, dev)
    o, lse = fa.attention(q8, k8, v8, causal=mask == "causal",
                          causal_bottom_right=mask == "causal_bottom_right",
                          descale_q=dq, descale_k=dk, descale_v=dv, return_lse=True,
                          bundle=bundle)
    torch.cuda.synchronize()
    assert o.dtype == torch.bfloat16 and lse.dtype == torch.float32
    o_ref, lse_ref = attention(q.double(), k.double(), v.double(), allowed, scale)
    o_naive, lse_naive = attention(qd, kd, vd, allowed, scale)
    e_o, n_o = max_err(o, o_ref), max_err(o_naive, o_ref)
    e_l, n_l = max_err(lse, lse_ref), max_err(lse_naive, lse_ref)
    ok = e_o <= 2 * n_o + 1e-5 and e_l <= 2 * n_l + 1e-5
    return ok, e_o, n_o, e_l, n_l


def cases(masks, dims, cases_per_mask):
    rng = random.Random(19)
    out = []
    for mask, d in [(m, d) for d in dims for m in masks]:
        for _ in range(cases_per_mask):
            hkv = rng.choice([1, 2, 4])
            h = hkv * rng.choice([1, 4, 8])
            nq = rng.choice([1, 17, 128, 200, 1000, rng.randint(1, 4096)])
            nk = rng.choice([1, 64, 129, 256, 1000, rng.randint(1, 4096)])
            out.append((mask, d, rng.randint(1, 2), h, hkv, nq, nk,
                        rng.choice([1.0, 30.0])))
    return out


def check_refusals(bundle, masks):
    """Wrong descales and the wrong entry points are refused with a message."""
    dev = "cuda"
    q8 = torch.randn(1, 4, 64, 128, device=dev).to(FP8)
    k8 = torch.randn(1, 2, 64, 128, device=dev).to(FP8)
    ones = torch.ones(1, 2, device=dev)
    bad = [("descale_q of shape [1, 4]", dict(descale_q=torch.ones(1, 4, device=dev))),
           ("descale_k in bf16", dict(descale_k=ones.bfloat16())),
           ("descale_v in float64", dict(descale_v=ones.double()))]
    failures = 0
    for what, kw in bad:
        try:
            fa.attention(q8, k8, k8, bundle=bundle, **kw)
            print("FAIL refusal: %s was accepted" % what)
            failures += 1
        except fa.FaError as e:
            print("ok refusal: %s: %s" % (what, str(e).splitlines()[0][:160]))
    try:
        qg = q8.clone().requires_grad_(True)
    except RuntimeError as e:  # a PyTorch without float8 autograd
        print("ok: this PyTorch refuses grad on float8: %s" % str(e).splitlines()[0][:120])
        return failures
    try:
        fa.attention(qg, k8, k8, bundle=bundle)
        print("FAIL refusal: an input requiring grad was accepted")
        failures += 1
    except fa.FaError as e:
        print("ok refusal: grad: %s" % str(e).splitlines()[0][:160])
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--cases", type=int, default=36,
                    help="cases per mask and head dim (36: 108 per head dim with 3 masks)")
    args = ap.parse_args()
    bundle = fa.load(args.bundle, args.lib, jit=False)
    kernels = [k for k in bundle.kernels() if k["dtype"] == "f8e4m3"]
    if not kernels:
        sys.exit("no f8e4m3 kernel in %s" % args.bundle)
    masks = sorted({k["mask"] for k in kernels})
    dims = sorted({k["head_dim"] for k in kernels})
    print("fp8 kernels: %s" % ", ".join(k["tag"] for k in kernels))
    failed = total = 0
    worst = 0.0
    for n, (mask, d, B, H, Hkv, Nq, Nk, mag) in enumerate(cases(masks, dims, args.cases)):
        total += 1
        try:
            ok, e_o, n_o, e_l, n_l = check_case(bundle, mask, d, B, H, Hkv, Nq, Nk, mag, n)
        except fa.FaError as e:
            ok, e_o, n_o, e_l, n_l = False, math.inf, 0, math.inf, 0
            print("error: %s" % e)
        worst = max(worst, e_o / max(n_o, 1e-12))
        line = ("%s %s d%d B%d H%d/%d Nq%d Nk%d x%g: O err %.3g (naive fp8 %.3g), "
                "LSE err %.3g (naive %.3g)" % ("ok" if ok else "FAIL", mask, d, B, H, Hkv, Nq,
                                                Nk, mag, e_o, n_o, e_l, n_l))
        print(line)
        failed += not ok
    failed += check_refusals(bundle, masks)
    print("fp8: %d cases, %d failed; worst O error / naive fp8 error %.2f"
          % (total, failed, worst))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
