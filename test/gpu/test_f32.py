#!/usr/bin/env python3
"""Differential test of the float32 kernels on the GPU: every f32 forward
config of the bundle (f32-accurate, "3xTF32", and TF32, `_tf32`), found by
the runtime for its query (allow_tf32 as the kernel) and launched through it
(fa_attention_forward), then through fa.attention with allow_tf32 True,
False and None; and every f32 backward config, run after the forward of the
same mode (forward_into, then backward_into: fa_attention_backward), then
through fa.attention's autograd.

Cases: random B, H with GQA (Hkv dividing H), Nq and Nk from 1 to 2k
(ragged: 1, 17, 63, 65, 127, 1000, ...), the kernel's head dims and mask
(run-time windows get random sizes, one side unbounded at times), inputs of
magnitude 1 or 3, and some q, k, v (and dO) read in place from [.., D + 4]
buffers (rows 16- but not 32-byte aligned: a multiple of 4 f32, not of 8).
O, LSE, dQ, dK, dV and the backward's workspaces start as NaN, so an
unwritten element fails; rows that see no key must give O = 0 and LSE =
-inf (and dQ = 0, keys no row sees dK = dV = 0: their references are 0).

Forward rules (max absolute errors over the case; `f64(x, y, z)` is
attention in float64 of those inputs):
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

Backward rules, for dQ, dK and dV each (the gradients of sum(O∘dO), dO
random of magnitude 1; its O and LSE are judged as above too):
  f32-accurate kernels: ref = the float64 autograd gradient of f64(q, k, v)
    plus the shift of D = rowsum(dO∘O) read from the O the forward stored
    (as test_attention.py: the algorithm prescribes it; at f32 it is tiny);
    base = the error of PyTorch's float32 math autograd (TF32 off) against
    the float64 gradient: err(fa) <= 2 base + atol.
  TF32 kernels: ref = the float64 autograd gradient of f64(tf32(q),
    tf32(k), tf32(v)) for dO rounded to TF32; base = the larger error
    against it of (a) the recompute backward in float64 with each product's
    operands rounded as a TF32 kernel's MMAs round them (Q, K, V, dO
    already; P before dV = Pᵀ·dO, dS before dQ = scale·dS·K and dK =
    scale·dSᵀ·Q), D = rowsum(dO∘O) of the unrounded dO and the O the
    forward stored (bwd_pre's f32 sums, no MMA), and (b) PyTorch's float32
    math autograd with TF32 matmuls: err(fa) <= 2 base + atol. The errors
    of fa and of PyTorch TF32 against the float64 gradient of the unrounded
    inputs are printed, for information.
  atol = 2^-17 T + slack. T is the largest sum of the absolute values of
    the terms an element of the gradient sums (dQ: scale·Σ_j |dS_ij|·|K_j|,
    dK: scale·Σ_i |dS_ij|·|Q_i| over the key head's rows, dV: Σ_i P_ij·|dO_i|,
    with the reference's P and dS): float32 results carry rounding errors
    of the terms, not of the result, which cancels (a row of dS sums to 0),
    so a flat atol would be too loose at magnitude 1 and too tight at 3
    (the scores' exp2 arguments, ex2.approx and the tensor cores' truncating
    adds); 2^-17 is 64 ulps of float32, against the O(1) relative errors of
    a wrong kernel. slack is test_attention.py's estimate of dP − D's
    float32 cancellation (2^-19 of Σ|dO∘V| per score here: D/8 truncating
    k-steps at d128), which leaves a few ulps where the exact difference and
    PyTorch's (softmax backward of a one-key row) are 0, carried into dQ and
    dK as a random walk over keys and rows.
fa.attention's autograd must give the same O, dK and dV bits as the direct
launches of the same kernels (allow_tf32=None with torch's switch set as the
mode at the forward and flipped before backward(): the backward keeps the
forward's choice), and dQ within 2^-18 max|dQ|: dQ is summed into dq_accum
by atomic adds per key block, whose order varies run to run.

fa.attention must give O bit-identical to the kernel's direct launch
(allow_tf32=True: the TF32 kernel where the bundle has one; False: the
accurate one; None: torch.backends.cuda.matmul.allow_tf32); where the bundle
has no f32 backward for a forward, its backward must fail with an FaError
naming the config to build (the bundle is loaded without JIT). Prints one
line per case and "f32: N/N passed"; exits 1 if any check failed.

Bundle (built on the development machine):
    build/bin/fa-aot --config-file test/gpu/configs_f32.txt -o out/bundle-f32
On the GPU machine:
    python3 test/gpu/test_f32.py --bundle out/bundle-f32 --lib build-rt/lib/libfa_runtime.so
(--only fwd or --only bwd runs one direction's configs.)
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
from fa._runtime import BWD, FWD  # noqa: E402
from test_attention import allowed_mask, lse_slack, max_err  # noqa: E402
from test_attention import reference as torch_reference  # noqa: E402
from test_attention import poisoned  # noqa: E402


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


def inputs_bwd(B, H, Hkv, Nq, Nk, d, dv, magnitude, padded, gen):
    """inputs() and dO (magnitude 1; padded like them)."""
    q, k, v = inputs(B, H, Hkv, Nq, Nk, d, dv, magnitude, padded, gen)
    pad = 4 if padded else 0
    do = torch.randn(B, H, Nq, dv + pad, device="cuda", generator=gen)[..., :dv]
    return q, k, v, do


def _fold(t, hkv):
    """[B, H, ...] summed over each key head's query heads: [B, Hkv, ...]."""
    return t.view(t.shape[0], hkv, t.shape[1] // hkv, *t.shape[2:]).sum(2)


def backward64(q, k, v, do, o, lse, allowed, scale, rnd=None, do_delta=None):
    """The recompute backward in float64, as the kernels compute it: P =
    exp(S·scale − LSE) from the LSE given, D = rowsum(dO∘O) of `do_delta`
    (default do) and the O given, dV = Pᵀ·dO, dP = dO·Vᵀ, dS = P∘(dP − D),
    dQ = scale·dS·K, dK = scale·dSᵀ·Q (dK, dV summed over a key head's query
    heads). rnd (tf32) rounds P and dS where they are a product's operand,
    as a TF32 kernel's MMAs do (q, k, v and do come rounded already; P in
    dS stays unrounded, as the kernel's registers). Returns dq, dk, dv and
    P and dS (unrounded) for term_bounds."""
    q, k, v, do, o = (t.double() for t in (q, k, v, do, o))
    do_delta = do if do_delta is None else do_delta.double()
    hkv = k.shape[1]
    g = q.shape[1] // hkv
    kk, vv = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    r = (lambda x: x) if rnd is None else (lambda x: rnd(x).double())
    s = torch.matmul(q, kk.transpose(-1, -2)) * scale
    # Rows without keys (LSE -inf) have every score masked: P = 0.
    p = torch.exp(s - lse.double()[..., None]).masked_fill(~allowed, 0)
    dv = torch.matmul(r(p).transpose(-1, -2), do)
    dp = torch.matmul(do, vv.transpose(-1, -2))
    ds = p * (dp - (do_delta * o).sum(-1, keepdim=True))
    dq = scale * torch.matmul(r(ds), kk)
    dk = scale * torch.matmul(r(ds).transpose(-1, -2), q)
    return dq, _fold(dk, hkv), _fold(dv, hkv), p, ds


def term_bounds(q, k, v, do, p, ds, scale):
    """(T of dQ, dK, dV; slack of dQ, dK) of the backward's atol (module
    docstring), from the reference's P and dS."""
    q, k, v, do = (t.double() for t in (q, k, v, do))
    hkv = k.shape[1]
    g = q.shape[1] // hkv
    kk, vv = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    top = lambda t: t.max().item() if t.numel() else 0.0  # noqa: E731
    t_dq = scale * torch.matmul(ds.abs(), kk.abs())
    t_dk = scale * _fold(torch.matmul(ds.abs().transpose(-1, -2), q.abs()), hkv)
    t_dv = _fold(torch.matmul(p.transpose(-1, -2), do.abs()), hkv)
    # dP - D's float32 cancellation: a few ulps of Σ|dO∘V| per score,
    # through K (dQ) and Q (dK), independent per key (per row): a 2-norm.
    w2 = (p * torch.matmul(do.abs(), vv.abs().transpose(-1, -2)) * 2.0 ** -19).square()
    slack_q = scale * torch.matmul(w2, kk.abs().amax(-1, keepdim=True).square()).sqrt()
    slack_k = scale * _fold(torch.matmul(w2.transpose(-1, -2),
                                         q.abs().amax(-1, keepdim=True).square()), hkv).sqrt()
    return top(t_dq), top(t_dk), top(t_dv), top(slack_q), top(slack_k)


def judge_grads(cfg, q, k, v, do, o, dq, dk, dv, allowed, scale):
    """(failures, [(name, error, bound)], note) of fa's dQ, dK, dV by the
    backward rule of cfg's kernel (module docstring); o is the O the
    forward stored (what the backward's D reads)."""
    def autograd64(qq, kk, vv, dd):
        x = [t.detach().double().requires_grad_(True) for t in (qq, kk, vv)]
        o64, lse64 = torch_reference(*x, allowed, scale)
        o64.backward(dd.double())
        return [t.grad for t in x], o64.detach(), lse64.detach()

    def autograd32(tf32_on):
        x = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        with matmul_tf32(tf32_on):
            o32, _ = torch_reference(*x, allowed, scale)
            o32.backward(do)
        return [t.grad for t in x]

    got, names, note = (dq, dk, dv), ("dq", "dk", "dv"), ""
    if cfg["tf32"]:
        qr, kr, vr, dor = tf32(q), tf32(k), tf32(v), tf32(do)
        ref, o_ref, lse_ref = autograd64(qr, kr, vr, dor)
        emu = backward64(qr, kr, vr, dor, o, lse_ref, allowed, scale, rnd=tf32, do_delta=do)
        torch_tf32 = autograd32(True)
        base = [max(max_err(e, r), max_err(t, r)) for e, t, r in zip(emu[:3], torch_tf32, ref)]
        _, _, _, p, ds = backward64(qr, kr, vr, dor, o_ref, lse_ref, allowed, scale)
        bounds = term_bounds(qr, kr, vr, dor, p, ds, scale)
        target = ref
        full, _, _ = autograd64(q, k, v, do)
        note = " (vs f64 of the f32 inputs: fa %s, torch TF32 %s)" % (
            "/".join("%.2e" % max_err(g, f) for g, f in zip(got, full)),
            "/".join("%.2e" % max_err(t, f) for t, f in zip(torch_tf32, full)))
    else:
        ref, o_ref, lse_ref = autograd64(q, k, v, do)
        base = [max_err(m, r) for m, r in zip(autograd32(False), ref)]
        exact = backward64(q, k, v, do, o_ref, lse_ref, allowed, scale)
        stored = backward64(q, k, v, do, o, lse_ref, allowed, scale)
        # D from the stored O: the reference moves by what that changes.
        target = [r + (a - b) for r, a, b in zip(ref, stored[:3], exact[:3])]
        bounds = term_bounds(q, k, v, do, exact[3], exact[4], scale)
    t_dq, t_dk, t_dv, slack_q, slack_k = bounds
    atol = (2.0 ** -17 * t_dq + slack_q, 2.0 ** -17 * t_dk + slack_k, 2.0 ** -17 * t_dv)
    errs, out = [], []
    for name, g, want, b, a in zip(names, got, target, base, atol):
        e, t = max_err(g, want), 2 * b + a
        out.append((name, e, t))
        if not e <= t:
            errs.append("%s error %.3g > %.3g" % (name, e, t))
    return errs, out, note


def kernel_pair(bundle, cfg, q, window, nk):
    """The tags of the forward and backward kernels the runtime finds for
    cfg's query (allow_tf32 as the backward kernel: forward_into and
    backward_into make the same queries); FaError unless both are f32 of
    cfg's mode."""
    cap, tags = fa._capability(q), []
    for direction in (FWD, BWD):
        kernel = bundle.find(direction, "f32", cfg["head_dim"], cfg["head_dim_v"], cfg["mask"],
                             window, cap, None, nk, allow_tf32=cfg["tf32"])
        info = bundle._info(kernel)
        if info["tf32"] != cfg["tf32"] or info["dtype"] != "f32":
            raise fa.FaError(1, "the %s query for %s found %s (no %s %s kernel in the bundle?)"
                             % ("fwd" if direction == FWD else "bwd", cfg["tag"], info["tag"],
                                "TF32" if cfg["tf32"] else "f32-accurate",
                                "fwd" if direction == FWD else "bwd"))
        tags.append(info["tag"])
    return tags


def run_backward(bundle, cfg, q, k, v, do, window):
    """O, LSE (forward_into) and dQ, dK, dV (backward_into) with allow_tf32
    as cfg's kernel; every output and workspace NaN-poisoned first."""
    kw = mask_kwargs(cfg, window)
    B, H, Nq, d = q.shape
    f32 = dict(dtype=torch.float32, device="cuda")
    o, lse = poisoned(B, H, Nq, v.shape[-1], **f32), poisoned(B, H, Nq, **f32)
    fa.forward_into(q, k, v, o, lse, bundle=bundle, allow_tf32=cfg["tf32"], **kw)
    dq, dk, dv = (poisoned(*t.shape, **f32) for t in (q, k, v))
    delta, acc = poisoned(B, H, Nq, **f32), poisoned(B, H, Nq, d, **f32)
    fa.backward_into(q, k, v, o, do, lse, dq, dk, dv, delta, acc, bundle=bundle,
                     allow_tf32=cfg["tf32"], **kw)
    torch.cuda.synchronize()
    return o, lse, dq, dk, dv


def backward_case(bundle, cfg, case, gen):
    """Runs one backward case; (failed, the line to print)."""
    B, H, Hkv, Nq, Nk, window, mag, padded = case
    d, dv = cfg["head_dim"], cfg["head_dim_v"]
    q, k, v, do = inputs_bwd(B, H, Hkv, Nq, Nk, d, dv, mag, padded, gen)
    allowed = allowed_mask(cfg["mask"], window, Nq, Nk, "cuda")
    scale = 1.0 / math.sqrt(d)
    grads, note, tags = [], "", [cfg["tag"], "?"]
    try:
        tags = kernel_pair(bundle, cfg, q, window, Nk)
        o, lse, dq, dk, dvv = run_backward(bundle, cfg, q, k, v, do, window)
        errs, e_o, t_o, e_l, t_l, _ = judge(o, lse, cfg, q, k, v, allowed, scale)
        errs = ["forward: " + e for e in errs]
        more, grads, note = judge_grads(cfg, q, k, v, do, o, dq, dk, dvv, allowed, scale)
        errs += more
    except fa.FaError as e:
        errs = [str(e)]
    line = "%s %s (fwd %s) B%d H%d/%d Nq%d Nk%d%s x%g%s: %s%s %s" % (
        "FAIL" if errs else "ok", tags[1], tags[0], B, H, Hkv, Nq, Nk,
        " w%s" % (window,) if cfg["mask"] == "window" else "", mag,
        " padded" if padded else "",
        ", ".join("%s err %.2e (<= %.2e)" % g for g in grads), note, "; ".join(errs))
    return bool(errs), line


def check_autograd(bundle, bwd_cfgs):
    """Per backward config: fa.attention's autograd (allow_tf32=None, torch's
    switch the mode's at the forward and the other at backward()) against
    forward_into + backward_into of the mode: O, dK, dV bit-identical, dQ
    within 2^-18 max|dQ| (atomic adds into dq_accum, in an order that
    varies). Through the C++ extension where it is built, then the Python
    autograd.Function too."""
    failures, gen = [], torch.Generator(device="cuda").manual_seed(11)
    for cfg in bwd_cfgs:
        d, dv, tf = cfg["head_dim"], cfg["head_dim_v"], cfg["tf32"]
        window = window_for(cfg, random.Random(2))
        kw = mask_kwargs(cfg, window)
        q, k, v, do = inputs_bwd(2, 4, 2, 100, 300, d, dv, 1.0, False, gen)
        try:
            tags = kernel_pair(bundle, cfg, q, window, 300)
            o, _, dq, dk, dvv = run_backward(bundle, cfg, q, k, v, do, window)
        except fa.FaError as e:
            print("FAIL autograd %s: %s" % (cfg["tag"], e))
            failures.append(cfg["tag"])
            continue
        tol = 2.0 ** -18 * dq.abs().max().item()

        def through_autograd():
            qa, ka, va = (t.clone().requires_grad_(True) for t in (q, k, v))
            with matmul_tf32(tf):
                oa = fa.attention(qa, ka, va, bundle=bundle, allow_tf32=None, **kw)
            with matmul_tf32(not tf):
                oa.backward(do)
            torch.cuda.synchronize()
            where = "C++ extension" if fa._ext else "Python autograd.Function"
            same = torch.equal(oa, o) and torch.equal(ka.grad, dk) and torch.equal(va.grad, dvv)
            diff = max_err(qa.grad, dq)
            ok = same and diff <= tol
            print("%s autograd (%s) %s/%s: O, dK, dV %s, dQ differs by %.2e (<= %.2e)"
                  % ("ok" if ok else "FAIL", where, tags[0], tags[1],
                     "bit-identical" if same else "DIFFER", diff, tol))
            return ok

        def attempt():
            try:
                return through_autograd()
            except fa.FaError as e:
                print("FAIL autograd %s: %s" % (cfg["tag"], e))
                return False

        ok = attempt()  # the extension where built (fa._ext is set by then)
        if fa._ext:
            ext, fa._ext = fa._ext, False  # and the Python autograd.Function
            try:
                ok = attempt() and ok
            finally:
                fa._ext = ext
        if not ok:
            failures.append(cfg["tag"])
    return failures


def check_attention_api(bundle, cfgs, has_bwd):
    """fa.attention's choice by allow_tf32 (bit-identical to the direct
    launch of the kernel it must pick) and, where the bundle has no f32
    backward it may take, the FaError of backward() naming the config."""
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
        if any((d, dv, mask, mode) in has_bwd for mode in ((False, True) if tf else (False,))):
            continue  # check_autograd runs its backward
        config = "bwd:f32:d%d%s:%s:mma_sync" % (d, "" if dv == d else ":v%d" % dv, mask)
        try:
            o = fa.attention(q.clone().requires_grad_(True), k, v, bundle=bundle,
                             allow_tf32=tf, **mask_kwargs(cfg, window))
            o.sum().backward()
            print("FAIL %s: a backward ran without an f32 backward in the bundle" % tag)
            failures.append(tag)
        except fa.FaError as e:
            ok = config in str(e) and "JIT is off" in str(e)
            print("%s no backward: %s" % ("ok" if ok else "FAIL",
                                          str(e).splitlines()[0][:200]))
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
    ap.add_argument("--only", choices=("fwd", "bwd"), default=None,
                    help="run one direction's configs only")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # the float32 references
    bundle = fa.load(args.bundle, args.lib, jit=False)
    kernels = bundle.kernels()

    def configs(direction):
        """One kernel per config (targets and tiles are the runtime's choice)."""
        seen, out = set(), []
        for k in kernels:
            if k["dtype"] != "f32" or k["direction"] != direction or (
                    k["split_kv"] or k["pack_gqa"] or k["varlen"] or k["paged"] or
                    k["block_sparse"] or k["sinks"] or k["score_mod"] or k["mask_mod"] or
                    k["deterministic"]):
                continue
            key = (k["head_dim"], k["head_dim_v"], k["mask"], k["window_left"],
                   k["window_right"], k["tf32"])
            if key not in seen:
                seen.add(key)
                out.append(k)
        return out

    cfgs, bwd_cfgs = configs("fwd"), configs("bwd")
    if not cfgs:
        sys.exit("no f32 forward kernel in %s" % args.bundle)
    has_bwd = {(k["head_dim"], k["head_dim_v"], k["mask"], k["tf32"]) for k in bwd_cfgs}
    rng = random.Random(args.seed)
    failed = total = 0
    for cfg in cfgs if args.only != "bwd" else []:
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
    fwd_total, fwd_failed = total, failed
    for cfg in bwd_cfgs if args.only != "fwd" else []:
        for case in cases(cfg, args.cases, rng):
            total += 1
            gen = torch.Generator(device="cuda").manual_seed(args.seed * 100003 + total)
            bad, line = backward_case(bundle, cfg, case, gen)
            failed += bad
            print(line, flush=True)
    api_failures = []
    if args.only != "bwd":
        api_failures += check_attention_api(bundle, cfgs, has_bwd)
    if args.only != "fwd":
        api_failures += check_autograd(bundle, bwd_cfgs)
    print("f32: %d/%d passed (forward %d/%d, backward %d/%d); fa.attention checks: %d failed"
          % (total - failed, total, fwd_total - fwd_failed, fwd_total,
             total - fwd_total - (failed - fwd_failed), total - fwd_total, len(api_failures)))
    sys.exit(1 if failed or api_failures else 0)


if __name__ == "__main__":
    main()
