#!/usr/bin/env python3
"""Differential test of the fp8 e4m3 forward (issue 19) on the GPU, through
fa.attention(q8, k8, v8, descale_q=, descale_k=, descale_v=) and the runtime
(fa_attention_forward_fp8).

Each case draws float32 Q, K, V, quantises them to float8_e4m3fn with
fa.quantize_fp8 (amax / 448) and compares fa's bf16 O and f32 LSE with the
float64 attention of the unquantised inputs. The rule (DESIGN.md, as the
flash-attn suite): fa's max error <= 2x that of a naive fp8 reference (the
same quantised inputs dequantised with the same descales, float32 math) +
1e-5. Rows that see no key (causal_bottom_right with Nq > Nk) must give
O = 0 and LSE = -inf. Cases (--cases per mask and head dim, 36): each head
dim the bundle has (128, 256) with each of its masks, GQA groups 1, 4 and 8,
ragged Nq and Nk (1 ... 4k), input magnitudes 1 and 30, for each descale
form the bundle's kernels read: one factor per (batch, key head) (FA3's;
Q's spans the query heads of its key head), and per 64-row block (kernels
with descale_block 64, config field blockscale: descale_q [B,H,ceil(Nq/64)],
descale_k [B,Hkv,ceil(Nk/64)]), every other one of whose cases scales a few
Q and K rows by 30 (outliers, which set a per-head factor for the whole head
but a block factor only for their block).
Rotated cases (--rotate-cases per mask and head dim of each form, 8): FA3's
incoherent processing, fa.quantize_fp8(rotate=True), on inputs with outlier
channels (every 32nd column of Q x4 and of K x16), under the same rule
against the naive reference of the rotated quantised inputs; each also runs
unrotated through the same kernel, and the rotation must lower fa's O error
in at least 3/4 of them.
Where the bundle has both forms for a mask and head dim, an outlier case
runs through each and prints both errors against the float64 reference.
Also: the runtime refuses wrong descale shapes and dtypes (block counts
too), fa.attention refuses a mix of the forms, the plain forward refuses
the fp8 kernel, and fa.attention refuses inputs that require grad.
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


def dequantise(x8, descale):
    """x8 [B, H, N, D] times its descale: [B, Hd] per head (Hd dividing H: a
    factor per group of H / Hd consecutive heads) or [B, H, ceil(N/64)] per
    64-row block; float32."""
    H, N = x8.shape[1], x8.shape[2]
    if descale.dim() == 2:
        factor = descale.repeat_interleave(H // descale.shape[1], dim=1)[:, :, None]
    else:
        factor = descale.repeat_interleave(fa.DESCALE_BLOCK, dim=2)[:, :, :N]
    return x8.float() * factor[..., None]


def quantise(q, k, v, block=False, rotate=False):
    """fa.quantize_fp8 of float32 q, k, v: ((q8, k8, v8), (descale_q,
    descale_k, descale_v), the dequantised q, k, v in float32; q and k
    rotated with rotate)."""
    q8, k8, v8, dq, dk, dv = fa.quantize_fp8(q, k, v, block=block, rotate=rotate)
    return (q8, k8, v8), (dq, dk, dv), tuple(
        dequantise(x8, s) for x8, s in ((q8, dq), (k8, dk), (v8, dv)))


def with_outliers(x, rows, gen, factor=30.0):
    """x with `rows` random rows of each (batch, head) scaled by `factor`."""
    B, H, N, _ = x.shape
    picked = torch.randint(0, N, (B, H, rows), generator=gen, device=x.device)
    scales = torch.ones(B, H, N, device=x.device)
    scales.scatter_(2, picked, factor)
    return x * scales[..., None]


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


def draw(d, B, H, Hkv, Nq, Nk, magnitude, outliers, seed, factor=30.0):
    """Float32 q, k, v of a case; `outliers` rows of each (batch, head) of q
    and k scaled by `factor`."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, H, Nq, d, generator=gen, device="cuda") * magnitude
    k = torch.randn(B, Hkv, Nk, d, generator=gen, device="cuda") * magnitude
    v = torch.randn(B, Hkv, Nk, d, generator=gen, device="cuda")
    if outliers:
        q = with_outliers(q, outliers, gen, factor)
        k = with_outliers(k, outliers, gen, factor)
    return q, k, v


def with_channel_outliers(q, k):
    """q and k with every 32nd column (from the 6th) x4 and x16: outlier
    channels, which set a per-head factor and the rounding of every value
    of the head."""
    cols = torch.arange(q.shape[-1], device=q.device) % 32 == 5
    return q * torch.where(cols, 4.0, 1.0), k * torch.where(cols, 16.0, 1.0)


def run_form(bundle, mask, q, k, v, block, rotate=False):
    """fa's O and LSE of q, k, v quantised in one descale form (q and k
    rotated first with rotate), the naive fp8 reference's, and the float64
    reference's (of the unquantised, unrotated inputs)."""
    d, Nq, Nk = q.shape[-1], q.shape[2], k.shape[2]
    (q8, k8, v8), (dq, dk, dv), (qd, kd, vd) = quantise(q, k, v, block, rotate)
    scale = 1.0 / math.sqrt(d)
    allowed = allowed_mask(mask, None, Nq, Nk, "cuda")
    o, lse = fa.attention(q8, k8, v8, causal=mask == "causal",
                          causal_bottom_right=mask == "causal_bottom_right",
                          descale_q=dq, descale_k=dk, descale_v=dv, return_lse=True,
                          bundle=bundle)
    torch.cuda.synchronize()
    assert o.dtype == torch.bfloat16 and lse.dtype == torch.float32
    ref = attention(q.double(), k.double(), v.double(), allowed, scale)
    return (o, lse), attention(qd, kd, vd, allowed, scale), ref


def check_case(bundle, mask, d, B, H, Hkv, Nq, Nk, magnitude, seed, block=False,
               outliers=0):
    q, k, v = draw(d, B, H, Hkv, Nq, Nk, magnitude, outliers, seed)
    return judge(*run_form(bundle, mask, q, k, v, block))


def judge(fa_out, naive, ref):
    """The 2x rule on O and LSE: (ok, fa's O error, the naive reference's,
    fa's LSE error, the naive reference's), each against `ref`."""
    (o, lse), (o_naive, lse_naive), (o_ref, lse_ref) = fa_out, naive, ref
    e_o, n_o = max_err(o, o_ref), max_err(o_naive, o_ref)
    e_l, n_l = max_err(lse, lse_ref), max_err(lse_naive, lse_ref)
    ok = e_o <= 2 * n_o + 1e-5 and e_l <= 2 * n_l + 1e-5
    return ok, e_o, n_o, e_l, n_l


def check_rotated(bundle, mask, d, B, H, Hkv, Nq, Nk, seed, block):
    """A rotated case with outlier channels: the 2x rule against the naive
    reference of the rotated inputs, and fa's O error rotated and not."""
    q, k, v = draw(d, B, H, Hkv, Nq, Nk, 1.0, 0, seed)
    q, k = with_channel_outliers(q, k)
    rotated = run_form(bundle, mask, q, k, v, block, rotate=True)
    (o_plain, _), _, _ = run_form(bundle, mask, q, k, v, block)
    return judge(*rotated) + (max_err(o_plain, rotated[2][0]),)


def cases(masks, dims, cases_per_mask, block):
    """(mask, d, B, H, Hkv, Nq, Nk, magnitude, outlier rows) per case; block
    descale cases have outliers in every other case."""
    rng = random.Random(19 + block)
    out = []
    for mask, d in [(m, d) for d in dims for m in masks]:
        for i in range(cases_per_mask):
            hkv = rng.choice([1, 2, 4])
            h = hkv * rng.choice([1, 4, 8])
            nq = rng.choice([1, 17, 128, 200, 1000, rng.randint(1, 4096)])
            nk = rng.choice([1, 64, 129, 256, 1000, rng.randint(1, 4096)])
            out.append((mask, d, rng.randint(1, 2), h, hkv, nq, nk,
                        rng.choice([1.0, 30.0]), rng.choice([1, 4]) if block and i % 2 else 0))
    return out


def compare_forms(bundle, mask, d):
    """Outlier cases (4 rows of each head of q and k scaled by 30, 300 and
    3000) through the per-head and the block kernels: prints each form's O
    and LSE error, fa's and the naive fp8 reference's, against the float64
    reference. (e4m3 keeps its relative precision at any factor; a per-head
    factor costs only the values it pushes below e4m3's normal range.)"""
    for factor in (30.0, 300.0, 3000.0):
        q, k, v = draw(d, 2, 8, 2, 1024, 1024, 1.0, 4, seed=7, factor=factor)
        errors = []
        for block in (False, True):
            (o, lse), (o_naive, lse_naive), (o_ref, lse_ref) = run_form(
                bundle, mask, q, k, v, block)
            errors.append("%s: O err %.3g (naive %.3g), LSE err %.3g (naive %.3g)" % (
                "block" if block else "per-head", max_err(o, o_ref),
                max_err(o_naive, o_ref), max_err(lse, lse_ref), max_err(lse_naive, lse_ref)))
        print("outliers x%g %s d%d B2 H8/2 N1024: %s" % (factor, mask, d, "; ".join(errors)))


def check_refusals(bundle, block_kernels):
    """Wrong descales and the wrong entry points are refused with a message;
    with block_kernels (a block-descale d128 forward without a mask in the
    bundle), block descales of the wrong block counts too."""
    dev = "cuda"
    q8 = torch.randn(1, 4, 64, 128, device=dev).to(FP8)
    k8 = torch.randn(1, 2, 64, 128, device=dev).to(FP8)
    ones = torch.ones(1, 2, device=dev)
    bad = [("descale_q of shape [1, 4]", dict(descale_q=torch.ones(1, 4, device=dev))),
           ("descale_k in bf16", dict(descale_k=ones.bfloat16())),
           ("descale_v in float64", dict(descale_v=ones.double())),
           ("block descale_q beside a per-head descale_k",
            dict(descale_q=torch.ones(1, 4, 1, device=dev), descale_k=ones))]
    if block_kernels:
        bad += [("block descale_q of 2 blocks for 64 rows",
                 dict(descale_q=torch.ones(1, 4, 2, device=dev),
                      descale_k=torch.ones(1, 2, 1, device=dev))),
                ("block descale_k per query head",
                 dict(descale_q=torch.ones(1, 4, 1, device=dev),
                      descale_k=torch.ones(1, 4, 1, device=dev)))]
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
    ap.add_argument("--rotate-cases", type=int, default=8,
                    help="rotated cases (outlier channels) per mask and head dim of each form")
    ap.add_argument("--cases", type=int, default=36,
                    help="cases per mask and head dim of each descale form (36: 108 per "
                    "head dim with 3 masks)")
    args = ap.parse_args()
    bundle = fa.load(args.bundle, args.lib, jit=False)
    kernels = [k for k in bundle.kernels() if k["dtype"] == "f8e4m3"]
    if not kernels:
        sys.exit("no f8e4m3 kernel in %s" % args.bundle)
    print("fp8 kernels: %s" % ", ".join(k["tag"] for k in kernels))
    # (mask, head dim) of each descale form's kernels.
    forms = {block: {(k["mask"], k["head_dim"]) for k in kernels
                     if bool(k["descale_block"]) == block} for block in (False, True)}
    failed = total = 0
    worst = 0.0
    for block in (False, True):
        masks = sorted({m for m, _ in forms[block]})
        dims = sorted({d for _, d in forms[block]})
        todo = [c for c in cases(masks, dims, args.cases, block) if c[:2] in forms[block]]
        for n, (mask, d, B, H, Hkv, Nq, Nk, mag, outliers) in enumerate(todo):
            total += 1
            try:
                ok, e_o, n_o, e_l, n_l = check_case(bundle, mask, d, B, H, Hkv, Nq, Nk, mag,
                                                    n + 100000 * block, block, outliers)
            except fa.FaError as e:
                ok, e_o, n_o, e_l, n_l = False, math.inf, 0, math.inf, 0
                print("error: %s" % e)
            worst = max(worst, e_o / max(n_o, 1e-12))
            line = ("%s %s %s d%d B%d H%d/%d Nq%d Nk%d x%g%s: O err %.3g (naive fp8 %.3g), "
                    "LSE err %.3g (naive %.3g)"
                    % ("ok" if ok else "FAIL", "block" if block else "per-head", mask, d, B, H,
                       Hkv, Nq, Nk, mag, " outliers %d" % outliers if outliers else "",
                       e_o, n_o, e_l, n_l))
            print(line)
            failed += not ok
    rotated = helped = 0
    for block in (False, True):
        rng = random.Random(29 + block)
        for mask, d in sorted(forms[block]):
            for i in range(args.rotate_cases):
                hkv = rng.choice([1, 2])
                h, nq, nk = hkv * rng.choice([1, 4]), rng.randint(64, 2048), rng.randint(64, 2048)
                total += 1
                rotated += 1
                try:
                    ok, e_o, n_o, e_l, n_l, plain = check_rotated(
                        bundle, mask, d, 1, h, hkv, nq, nk, 500 + i, block)
                except fa.FaError as e:
                    ok, e_o, n_o, e_l, n_l, plain = False, math.inf, 0, math.inf, 0, 0
                    print("error: %s" % e)
                helped += e_o < plain
                worst = max(worst, e_o / max(n_o, 1e-12))
                print("%s rotated %s %s d%d H%d/%d Nq%d Nk%d: O err %.3g (naive fp8 %.3g, "
                      "unrotated %.3g), LSE err %.3g (naive %.3g)"
                      % ("ok" if ok else "FAIL", "block" if block else "per-head", mask, d, h,
                         hkv, nq, nk, e_o, n_o, plain, e_l, n_l))
                failed += not ok
    if rotated:
        print("rotation lowered fa's O error in %d of %d cases" % (helped, rotated))
        if 4 * helped < 3 * rotated:
            print("FAIL: the rotation helped in fewer than 3/4 of the cases")
            failed += 1
    for mask, d in sorted(forms[False] & forms[True]):
        try:
            compare_forms(bundle, mask, d)
        except fa.FaError as e:
            print("FAIL outliers %s d%d: %s" % (mask, d, e))
            failed += 1
    failed += check_refusals(bundle, ("none", 128) in forms[True])
    print("fp8: %d cases, %d failed; worst O error / naive fp8 error %.2f"
          % (total, failed, worst))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
