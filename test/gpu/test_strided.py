#!/usr/bin/env python3
"""Strided inputs on the GPU (issue 18; H200 only, never CI).

Every forward kernel of a bundle (mma.sync, wgmma, persistent, GQA shapes;
split-KV kernels through fa_attention_forward_splitkv) runs on q, k, v given
as x.view(B, N, H, D).transpose(1, 2) of [B, N, H, D] projections, with O
allocated in the same [B, N, H, Dv] memory order, and O and LSE are judged
against the float64 reference by the DESIGN.md rule (test_every_kernel.judge),
and O must equal, bit for bit, the same kernel's O from contiguous inputs
(only addressing differs). Shapes: ragged tiles with GQA, and one with more
query tiles than SMs (persistent grids). Outputs are NaN-poisoned first.

Every backward kernel (mma.sync, wgmma warp-specialised, deterministic,
dsplit) runs the same way on q, k, v, o and dO as [B, N, H, D] views with
dQ, dK, dV allocated (NaN-poisoned) in [B, N, H, D] memory order: the
gradients are judged against float64 autograd by the DESIGN.md rule
(test_every_kernel.Problem's references), and dK, dV (register
accumulators, a fixed order) must equal bit for bit the same kernel's from
contiguous tensors; dQ too for deterministic kernels (the others add dQ with
unordered atomics).

Then fa.attention end to end on the strided views: forward (no copy: O
shares q's layout) and backward (no copy either: dQ, dK, dV in q's, k's,
v's layouts; gradients against float64 autograd by the same rule).

    python3 test/gpu/test_strided.py --bundle out/bundle --lib <libfa_runtime.so>
"""
import argparse
import ctypes
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from fa import _runtime as rt  # noqa: E402
from test_attention import allowed_mask, lse_slack, max_err, reference  # noqa: E402
from test_every_kernel import (DTYPES, Problem, Shape, config_key, judge,  # noqa: E402
                               launch_backward)

SHAPES = [  # name, B, H, Hkv, Nq, Nk
    ("ragged-gqa", 2, 6, 2, 333, 461),
    ("grid", 2, 16, 4, 1100, 1050),
]


def projection_view(b, n, h, d, dtype, gen, dev):
    """A [B, H, N, D] view (unit last stride) of a [B, N, H, D] buffer."""
    x = torch.randn(b, n, h, d, generator=gen, device=dev).to(dtype)
    return x.transpose(1, 2)


def kernels_of(bundle, direction="fwd"):
    infos = bundle.kernels()
    for i, info in enumerate(infos):
        info["handle"] = ctypes.c_void_p(bundle.lib.fa_bundle_kernel_at(bundle._handle, i))
    return [k for k in infos if k["direction"] == direction and not k.get("score_mod")]


def as_projection(t):
    """t's values as a [B, H, N, D] view of a [B, N, H, D] buffer."""
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def check_backward_kernel(bundle, kernel, shape, dev):
    """One backward kernel on [B, N, H, D] views against the float64
    gradients and against its own run on contiguous tensors."""
    seed = hash((kernel["tag"], shape.name)) % 2**31
    p = Problem(config_key(kernel), shape, dev, seed)
    r = p.bwd()
    b, h, nq = p.q.shape[0], p.q.shape[1], p.q.shape[2]

    def run(q, k, v, o, do, layout):
        dq, dk, dv = (layout(torch.full_like(t, float("nan"))) for t in (p.q, p.k, p.v))
        delta = torch.full((b, h, nq), float("nan"), device=dev)
        acc = torch.full(p.q.shape, float("nan"), device=dev)
        launch_backward(bundle, kernel, q, k, v, o, do, r["lse"], dq, dk, dv, delta, acc,
                        p.scale)
        torch.cuda.synchronize()
        return dq, dk, dv

    views = [as_projection(t) for t in (p.q, p.k, p.v, r["o"], p.do)]
    got = run(*views, as_projection)
    ref = run(p.q, p.k, p.v, r["o"], p.do, lambda t: t)
    res = [judge(name, g, *r[name][:3], slack=r[name][3])
           for name, g in zip(("dq", "dk", "dv"), got)]
    layout_ok = all(g.stride() == v.stride() for g, v in zip(got, views[:3]))
    res.append({"what": "layout", "err": 0.0 if layout_ok else 1.0, "tol": 0.0,
                "ok": layout_ok})
    bits = lambda t: t.contiguous().view(torch.int16)  # noqa: E731
    exact = ("dq", "dk", "dv") if kernel.get("deterministic") else ("dk", "dv")
    for name, g, c in zip(("dq", "dk", "dv"), got, ref):
        if name in exact:
            same = torch.equal(bits(g), bits(c))
            res.append({"what": name + "==contiguous", "err": 0.0 if same else 1.0,
                        "tol": 0.0, "ok": same})
    return res


BACKWARD_SHAPES = [
    Shape("ragged-gqa", 2, 6, 2, 333, 461, 1.0, False),
    Shape("grid", 2, 16, 4, 1100, 1050, 1.0, False),
]


def launch(bundle, kernel, q, k, v, o, lse, scale):
    args = rt.ForwardArgs(*[fa._tensor(t) for t in (q, k, v, o, lse)], scale)
    if not kernel.get("split_kv"):
        fa._launch(bundle.lib, bundle.lib.fa_attention_forward, kernel["handle"], args, q)
        return
    b, h, nq, nk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    splits = max(1, min(4, (nk // kernel["block_kv"]) // 2))
    nbytes = ctypes.c_uint64()
    rt.check(bundle.lib, bundle.lib.fa_splitkv_workspace_bytes(
        kernel["handle"], b, h, nq, splits, ctypes.byref(nbytes)))
    ws = torch.empty(nbytes.value, dtype=torch.uint8, device=q.device)
    fa._launch(bundle.lib, bundle.lib.fa_attention_forward_splitkv, kernel["handle"], args, q,
               ws.data_ptr(), nbytes.value, splits)


def check_kernel(bundle, kernel, shape, dev):
    name, b, h, hkv, nq, nk = shape
    dt = DTYPES[kernel["dtype"]]
    d, dv = kernel["head_dim"], kernel["head_dim_v"]
    gen = torch.Generator(device=dev).manual_seed(hash((kernel["tag"], name)) % 2**31)
    q = projection_view(b, nq, h, d, dt, gen, dev)
    k = projection_view(b, nk, hkv, d, dt, gen, dev)
    v = projection_view(b, nk, hkv, dv, dt, gen, dev)
    scale = 1 / math.sqrt(d)
    allowed = allowed_mask(kernel["mask"], (kernel["window_left"], kernel["window_right"]),
                           nq, nk, dev)
    with torch.no_grad():
        o64, lse64 = reference(q.double(), k.double(), v.double(), allowed, scale)
        ol, _ = reference(q, k, v, allowed, scale)
        _, lse32 = reference(q.float(), k.float(), v.float(), allowed, scale)
    o = torch.full((b, nq, h, dv), float("nan"), dtype=dt, device=dev).transpose(1, 2)
    lse = torch.full((b, h, nq), float("nan"), device=dev)
    launch(bundle, kernel, q, k, v, o, lse, scale)
    oc = torch.full((b, h, nq, dv), float("nan"), dtype=dt, device=dev)
    lsec = torch.full((b, h, nq), float("nan"), device=dev)
    launch(bundle, kernel, q.contiguous(), k.contiguous(), v.contiguous(), oc, lsec, scale)
    torch.cuda.synchronize()
    results = [judge("o", o, o64, ol, o64),
               judge("lse", lse, lse64, lse32, lse64, slack=lse_slack(q, k, lse64, scale))]
    same = torch.equal(o.contiguous(), oc) and torch.equal(lse, lsec)
    results.append({"what": "o==contiguous", "err": 0.0 if same else 1.0, "tol": 0.0,
                    "ok": same})
    return results


def check_api(bundle, dev):
    """fa.attention on strided views: O in q's layout, gradients right."""
    failures = 0
    for causal in (False, True):
        b, n, h, hkv, d = 2, 777, 8, 2, 128
        gen = torch.Generator(device=dev).manual_seed(7)
        q = projection_view(b, n, h, d, torch.bfloat16, gen, dev).requires_grad_()
        k = projection_view(b, n, hkv, d, torch.bfloat16, gen, dev).requires_grad_()
        v = projection_view(b, n, hkv, d, torch.bfloat16, gen, dev).requires_grad_()
        o = fa.attention(q, k, v, causal=causal, bundle=bundle)
        allowed = allowed_mask("causal" if causal else "none", (-1, -1), n, n, dev)
        q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
        o64, _ = reference(q64, k64, v64, allowed, 1 / math.sqrt(d))
        ql, kl, vl = (t.detach().clone().requires_grad_() for t in (q, k, v))
        ol, _ = reference(ql, kl, vl, allowed, 1 / math.sqrt(d))
        do = torch.randn(o.shape, generator=gen, device=dev).to(o.dtype)
        o.backward(do)
        o64.backward(do.double())
        ol.backward(do)
        layout_ok = o.stride() == q.stride() and all(
            t.grad.stride() == t.stride() for t in (q, k, v))
        checks = [judge("o", o.detach(), o64.detach(), ol.detach(), o64.detach())]
        for nm, t, t64, tl in (("dq", q, q64, ql), ("dk", k, k64, kl), ("dv", v, v64, vl)):
            checks.append(judge(nm, t.grad, t64.grad, tl.grad, t64.grad))
        ok = layout_ok and all(c["ok"] for c in checks)
        failures += not ok
        print("fa.attention strided causal=%s: O strides %s, dQ %s (q %s) %s; %s -> %s" % (
            causal, o.stride(), q.grad.stride(), q.stride(), "ok" if layout_ok else "WRONG",
            ", ".join("%s %.2e/%.2e" % (c["what"], c["err"], c["tol"]) for c in checks),
            "pass" if ok else "FAIL"))
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--only", default="", help="only kernels whose tag contains this")
    args = ap.parse_args()
    dev = torch.device("cuda")
    bundle = fa.load(args.bundle, args.lib)
    failures, runs = 0, 0
    for kernel in kernels_of(bundle):
        if args.only not in kernel["tag"]:
            continue
        if not kernel.get("strided"):
            print("%s: takes no strides (bundle before version 7), skipped" % kernel["tag"])
            continue
        if kernel["mma"] == "wgmma" and torch.cuda.get_device_capability() != (9, 0):
            continue
        for shape in SHAPES:
            res = check_kernel(bundle, kernel, shape, dev)
            ok = all(r["ok"] for r in res)
            failures += not ok
            runs += 1
            print("%-70s %-10s %s %s" % (
                kernel["tag"], shape[0],
                " ".join("%s %.2e/%.2e" % (r["what"], r["err"], r["tol"]) for r in res),
                "pass" if ok else "FAIL"), flush=True)
    for kernel in kernels_of(bundle, "bwd"):
        if args.only not in kernel["tag"]:
            continue
        if not kernel.get("strided"):
            print("%s: takes no strides (bundle before strided backwards), skipped"
                  % kernel["tag"])
            continue
        if kernel["mma"] == "wgmma" and torch.cuda.get_device_capability() != (9, 0):
            continue
        for shape in BACKWARD_SHAPES:
            res = check_backward_kernel(bundle, kernel, shape, dev)
            ok = all(r["ok"] for r in res)
            failures += not ok
            runs += 1
            print("%-70s %-10s %s %s" % (
                kernel["tag"], shape.name,
                " ".join("%s %.2e/%.2e" % (r["what"], r["err"], r["tol"]) for r in res),
                "pass" if ok else "FAIL"), flush=True)
    failures += check_api(bundle, dev)
    print("strided: %d kernel launches checked, %d failed" % (runs, failures))
    return 1 if failures or runs == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
