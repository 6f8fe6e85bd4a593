#!/usr/bin/env python3
"""Differential test of the float32 forwards on the GPU: every f32 forward
config of the bundle (f32-accurate, "3xTF32", and TF32, `_tf32`), found by
the runtime for its query (allow_tf32 as the kernel) and launched through it
(fa_attention_forward), then through fa.attention with allow_tf32 True,
False and None.

Cases: random B, H with GQA (Hkv dividing H), Nq and Nk from 1 to 2k
(ragged: 1, 17, 63, 65, 127, 1000, ...), the kernel's head dims and mask
(run-time windows get random sizes, one side unbounded at times), inputs of
magnitude 1 or 3, and some q, k, v read in place from [.., D + 4] buffers
(rows 16- but not 32-byte aligned: a multiple of 4 f32, not of 8). O and
LSE start as NaN, so an unwritten row fails; rows that see no key must give
O = 0 and LSE = -inf.

Rules (max absolute errors over the case; `f64(x, y, z)` is attention in
float64 of those inputs):
  f32-accurate kernels, the flash-attn rule against float32 math: with
    ref = f64(q, k, v) and `math` PyTorch's float32 attention with TF32 off
    (what SDPA's math backend computes),
      err(fa O) <= 2 err(math O) + 1e-5,
      err(fa LSE) <= 2 err(math LSE) + 1e-5 + lse_slack
    (lse_slack: test_attention.py's float32 rounding at the LSE's size).
  TF32 kernels: a TF32 kernel rounds q, k and v to TF32 (cvt.rna: 10-bit
    mantissa, to nearest) by design, so its reference is ref = f64(tf32(q),
    tf32(k), tf32(v)); what it adds is P rounded to TF32 as the P·V operand
    and float32 sums. The O baseline is the larger error, against ref, of
    (a) that rounding emulated (ref with P rounded to TF32 before P·V) and
    (b) PyTorch's float32 attention with TF32 matmuls (cuBLAS; torch's
    allow_tf32): err(fa O) <= 2 max(err(a), err(b)) + 1e-5. Emulating the
    kernel's rounding keeps the baseline honest where cuBLAS picks a
    non-tensor-core kernel for small shapes; (b) keeps it that of the TF32
    math users compare with. The LSE depends on float32 sums of exact TF32
    products only: err(fa LSE) <= 2 err(float32 math of the rounded inputs)
    + 1e-5 + lse_slack. The error against f64(q, k, v) is printed beside
    PyTorch TF32's, for information.

fa.attention must give O bit-identical to the kernel's direct launch
(allow_tf32=True: the TF32 kernel where the bundle has one; False: the
accurate one; None: torch.backends.cuda.matmul.allow_tf32), and refuse
inputs that require grad (no f32 backward) unless the bundle has an f32
backward. Prints one line per case and "f32: N/N passed"; exits 1 if any
check failed.

Bundle (built on the development machine):
    build/bin/fa-aot --config-file test/gpu/configs_f32.txt -o out/bundle-f32
On the GPU machine:
    python3 test/gpu/test_f32.py --bundle out/bundle-f32 --lib build-rt/lib/libfa_runtime.so
"""
import argparse
import contextlib
import math
import os
import random
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from fa._runtime import FWD  # noqa: E402
from test_attention import allowed_mask, lse_slack, max_err  # noqa: E402
from test_attention import reference as torch_reference  # noqa: E402


def tf32(x):
    """x as float32 rounded to TF32 as cvt.rna.tf32.f32 does: 10 mantissa
    bits, to nearest, ties away from zero (the magnitude's bits + half an
    ulp, truncated; the sign bit rides along)."""
    bits = x.float().contiguous().view(torch.int32)
    return ((bits + 0x1000) & -0x2000).view(torch.float32)


def attention64(q, k, v, allowed, scale, p_round=None):
    """O and LSE in float64; rows without keys give O = 0 and LSE = -inf.
    p_round rounds the unnormalised probabilities (in [0, 1], from the row
    maximum) before P·V, as a kernel's MMA operand; the row sums stay
    unrounded, as the kernels keep them."""
    q, k, v = q.double(), k.double(), v.double()
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    s = s.masked_fill(~allowed, float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    pv = p if p_round is None else p_round(p).double()
    o = torch.matmul(pv, v) / torch.where(l > 0, l, torch.ones_like(l))
    lse = torch.where(l > 0, torch.log(l) + m, torch.full_like(l, float("-inf")))
    return o, lse.squeeze(-1)


@contextlib.contextmanager
def matmul_tf32(on):
    """torch.backends.cuda.matmul.allow_tf32 = on within."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = on
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def torch_math(q, k, v, allowed, scale, tf32_on):
    """PyTorch's float32 attention (matmul, softmax, matmul) with TF32
    matmuls on or off."""
    with torch.no_grad(), matmul_tf32(tf32_on):
        return torch_reference(q, k, v, allowed, scale)


def judge(o, lse, cfg, q, k, v, allowed, scale):
    """(failures, O error, O bound, LSE error, LSE bound, note) by the rule
    of cfg's kernel (the module's docstring)."""
    errs = []
    if torch.isnan(o).any() or torch.isnan(lse).any():
        errs.append("NaN in O or LSE (unwritten rows?)")
    empty = ~allowed.any(-1)
    if empty.any():
        rows = empty.expand(lse.shape)
        if not torch.isneginf(lse[rows]).all() or o[rows].abs().max() != 0:
            errs.append("rows without keys must give O = 0 and LSE = -inf")
    note = ""
    if cfg["tf32"]:
        qr, kr, vr = tf32(q), tf32(k), tf32(v)
        o_ref, lse_ref = attention64(qr, kr, vr, allowed, scale)
        o_emu, _ = attention64(qr, kr, vr, allowed, scale, p_round=tf32)
        o_cublas, _ = torch_math(q, k, v, allowed, scale, True)
        base_o = max(max_err(o_emu, o_ref), max_err(o_cublas, o_ref))
        _, lse_math = torch_math(qr, kr, vr, allowed, scale, False)
        slack = lse_slack(qr, kr, lse_ref, scale)
        o64, _ = attention64(q, k, v, allowed, scale)
        note = " (vs f64 of the f32 inputs: fa %.2e, torch TF32 %.2e)" % (
            max_err(o, o64), max_err(o_cublas, o64))
    else:
        o_ref, lse_ref = attention64(q, k, v, allowed, scale)
        o_math, lse_math = torch_math(q, k, v, allowed, scale, False)
        base_o = max_err(o_math, o_ref)
        slack = lse_slack(q, k, lse_ref, scale)
    e_o, t_o = max_err(o, o_ref), 2 * base_o + 1e-5
    e_l, t_l = max_err(lse, lse_ref), 2 * max_err(lse_math, lse_ref) + 1e-5 + slack
    if not e_o <= t_o:
        errs.append("O error %.3g > %.3g" % (e_o, t_o))
    if not e_l <= t_l:
        errs.append("LSE error %.3g > %.3g" % (e_l, t_l))
    return errs, e_o, t_o, e_l, t_l, note


def inputs(B, H, Hkv, Nq, Nk, d, dv, magnitude, padded, gen):
    """q, k, v float32 on the GPU; padded: views of [.., D + 4] buffers
    (row strides a multiple of 4 elements, not of 8)."""
    def make(h, n, cols):
        pad = 4 if padded else 0
        x = torch.randn(B, h, n, cols + pad, device="cuda", generator=gen) * magnitude
        return x[..., :cols]
    return make(H, Nq, d), make(Hkv, Nk, d), make(Hkv, Nk, dv)


def run_kernel(bundle, cfg, q, k, v, window, nk):
    """O and LSE of the runtime's kernel for cfg's query (allow_tf32 as the
    kernel), launched directly; the tag it chose."""
    cap = fa._capability(q)
    kernel = bundle.find(FWD, "f32", cfg["head_dim"], cfg["head_dim_v"], cfg["mask"], window,
                         cap, "mma_sync", nk, allow_tf32=cfg["tf32"])
    info = bundle._info(kernel)
    if info["tf32"] != cfg["tf32"] or info["dtype"] != "f32":
        raise fa.FaError(1, "query for %s found %s" % (cfg["tag"], info["tag"]))
    B, H, Nq, _ = q.shape
    o = torch.full((B, H, Nq, v.shape[-1]), float("nan"), device="cuda")
    lse = torch.full((B, H, Nq), float("nan"), device="cuda")
    args = fa.ForwardArgs(*[fa._tensor(t) for t in (q, k, v, o, lse)],
                          1.0 / math.sqrt(q.shape[-1]))
    fa._launch(bundle.lib, bundle.lib.fa_attention_forward, kernel, args, q)
    torch.cuda.synchronize()
    return o, lse, info["tag"]


def window_for(cfg, rng):
    if cfg["mask"] != "window":
        return (-1, -1)
    if cfg["window_left"] >= 0 or cfg["window_right"] >= 0:
        return (cfg["window_left"], cfg["window_right"])
    return (rng.choice([-1, 0, 5, 64, 200]), rng.choice([-1, 0, 3, 100]))


def cases(cfg, n, rng):
    """(B, H, Hkv, Nq, Nk, window, magnitude, padded), at most 2^25 scores."""
    sizes = [1, 17, 63, 64, 65, 127, 200, 1000]
    out = [(1, 1, 1, 1, 1, window_for(cfg, rng), 1.0, False),
           (2, 8, 2, 65, 1000, window_for(cfg, rng), 1.0, cfg["strided"])]
    while len(out) < n:
        hkv = rng.choice([1, 2, 4])
        h = hkv * rng.choice([1, 2, 4])
        nq = rng.choice(sizes + [rng.randint(1, 2048)])
        nk = rng.choice(sizes + [rng.randint(1, 2048)])
        b = rng.randint(1, 2)
        if b * h * nq * nk > 1 << 25:
            continue
        out.append((b, h, hkv, nq, nk, window_for(cfg, rng), rng.choice([1.0, 3.0]),
                    cfg["strided"] and rng.random() < 0.3))
    return out


def mask_kwargs(cfg, window):
    return {"causal": cfg["mask"] == "causal",
            "causal_bottom_right": cfg["mask"] == "causal_bottom_right",
            "window": window if cfg["mask"] == "window" else None}


def check_attention_api(bundle, cfgs, has_bwd):
    """fa.attention's choice by allow_tf32 (bit-identical to the direct
    launch of the kernel it must pick) and its refusal of grad."""
    failures, gen = [], torch.Generator(device="cuda").manual_seed(7)
    keys = {(c["head_dim"], c["head_dim_v"], c["mask"], c["window_left"], c["window_right"],
             c["tf32"]) for c in cfgs}
    for cfg in cfgs:
        d, dv, mask, tf = cfg["head_dim"], cfg["head_dim_v"], cfg["mask"], cfg["tf32"]
        window = window_for(cfg, random.Random(1)) if mask == "window" else (-1, -1)
        q, k, v = inputs(2, 4, 2, 100, 300, d, dv, 1.0, False, gen)
        want, _, tag = run_kernel(bundle, cfg, q, k, v, window, 300)
        # (allow_tf32, torch's flag) of the calls that must take this kernel.
        calls = [(True, False), (None, True)] if tf else [(False, True), (None, False)]
        twin = (d, dv, mask, cfg["window_left"], cfg["window_right"], True)
        if not tf and twin not in keys:
            calls.append((True, False))  # allowed, not required
        for allow, flag in calls:
            with matmul_tf32(flag):
                got = fa.attention(q, k, v, bundle=bundle, allow_tf32=allow,
                                   **mask_kwargs(cfg, window))
            torch.cuda.synchronize()
            same = torch.equal(got, want)
            print("%s fa.attention(allow_tf32=%s) with torch's allow_tf32 %s: %s %s"
                  % ("ok" if same else "FAIL", allow, flag, tag,
                     "bit-identical" if same else "differs from the direct launch"))
            if not same:
                failures.append(tag)
        if (d, dv, mask) in has_bwd:
            continue
        try:
            fa.attention(q.clone().requires_grad_(True), k, v, bundle=bundle,
                         **mask_kwargs(cfg, window))
            print("FAIL %s: an input requiring grad was accepted without an f32 backward"
                  % tag)
            failures.append(tag)
        except fa.FaError as e:
            ok = "no float32 backward kernel" in str(e)
            print("%s refusal: grad: %s" % ("ok" if ok else "FAIL",
                                             str(e).splitlines()[0][:160]))
            if not ok:
                failures.append(tag)
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None, help="libfa_runtime.so")
    ap.add_argument("--cases", type=int, default=24, help="random cases per config")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # the float32 references
    bundle = fa.load(args.bundle, args.lib, jit=False)
    kernels = bundle.kernels()
    plain = [k for k in kernels if k["dtype"] == "f32" and k["direction"] == "fwd" and
             not (k["split_kv"] or k["pack_gqa"] or k["varlen"] or k["paged"] or
                  k["block_sparse"] or k["sinks"] or k["score_mod"] or k["mask_mod"])]
    if not plain:
        sys.exit("no f32 forward kernel in %s" % args.bundle)
    seen, cfgs = set(), []
    for k in plain:  # one per config: targets and tiles are the runtime's choice
        key = (k["head_dim"], k["head_dim_v"], k["mask"], k["window_left"],
               k["window_right"], k["tf32"])
        if key not in seen:
            seen.add(key)
            cfgs.append(k)
    has_bwd = {(k["head_dim"], k["head_dim_v"], k["mask"]) for k in kernels
               if k["dtype"] == "f32" and k["direction"] == "bwd"}
    rng = random.Random(args.seed)
    failed = total = 0
    for cfg in cfgs:
        for n, (B, H, Hkv, Nq, Nk, window, mag, padded) in enumerate(cases(cfg, args.cases,
                                                                           rng)):
            total += 1
            gen = torch.Generator(device="cuda").manual_seed(args.seed * 100003 + total)
            d, dv = cfg["head_dim"], cfg["head_dim_v"]
            q, k, v = inputs(B, H, Hkv, Nq, Nk, d, dv, mag, padded, gen)
            allowed = allowed_mask(cfg["mask"], window, Nq, Nk, "cuda")
            try:
                o, lse, tag = run_kernel(bundle, cfg, q, k, v, window, Nk)
                errs, e_o, t_o, e_l, t_l, note = judge(o, lse, cfg, q, k, v, allowed,
                                                       1.0 / math.sqrt(d))
            except fa.FaError as e:
                tag, errs, e_o, t_o, e_l, t_l, note = cfg["tag"], [str(e)], 0, 0, 0, 0, ""
            failed += bool(errs)
            print("%s %s B%d H%d/%d Nq%d Nk%d%s x%g%s: O err %.2e (<= %.2e), LSE err %.2e "
                  "(<= %.2e)%s %s"
                  % ("FAIL" if errs else "ok", tag, B, H, Hkv, Nq, Nk,
                     " w%s" % (window,) if cfg["mask"] == "window" else "", mag,
                     " padded" if padded else "", e_o, t_o, e_l, t_l, note,
                     "; ".join(errs)), flush=True)
    api_failures = check_attention_api(bundle, cfgs, has_bwd)
    print("f32: %d/%d passed; fa.attention checks: %d failed"
          % (total - failed, total, len(api_failures)))
    sys.exit(1 if failed or api_failures else 0)


if __name__ == "__main__":
    main()
