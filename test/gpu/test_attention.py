#!/usr/bin/env python3
"""Differential GPU test of an fa bundle against PyTorch (H200 only, never CI).

For random cases over the bundle's kernels (B, H, Hkv with GQA/MQA, Nq != Nk
with ragged tails, Nq = 1, more query tiles than SMs for wgmma kernels, every
head dim, mask and dtype the bundle has) it
runs fa's forward and backward and compares with a float64 PyTorch reference.
Pass rule (the flash-attn suite's): max|fa - ref64| <= 2 * max|math - ref64|
+ 1e-5, where `math` is the same reference run in the inputs' precision (for
LSE, which fa computes in float32: in float32, plus lse_slack, the float32
rounding of fa's scores and log-sum).
Outputs and workspaces are NaN-poisoned before every launch, so anything a
kernel fails to write shows up. Bad launches must be rejected with a message
and must leave the outputs untouched. Each forward kernel's instructions
(mma_sync, wgmma) is tested as its own config (--mma restricts to one), with
the backward of the same instructions where the bundle has it; for wgmma
kernels many launches on two streams check the runtime's tensor-map slots.
Where the bundle has deterministic backward kernels, their configs run as
configs of their own (deterministic=True), and some of their cases run the
backward three times and require bit-identical dQ, dK and dV.

    python3 test/gpu/test_attention.py --bundle out/bundle --lib build/lib/libfa_runtime.so
"""
import argparse
import json
import math
import os
import random
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa  # noqa: E402
import score_mods  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def allowed_mask(mask, window, nq, nk, device):
    """[Nq, Nk] bool: which keys each query row may see (docs/ABI.md)."""
    i = torch.arange(nq, device=device).unsqueeze(1)
    j = torch.arange(nk, device=device).unsqueeze(0)
    off = nk - nq
    if mask == "none":
        return torch.ones(nq, nk, dtype=torch.bool, device=device)
    if mask == "causal":
        return j <= i
    if mask == "causal_bottom_right":
        return j <= i + off
    left, right = window
    ok = torch.ones(nq, nk, dtype=torch.bool, device=device)
    if left >= 0:
        ok &= j >= i + off - left
    if right >= 0:
        ok &= j <= i + off + right
    return ok


def reference(q, k, v, allowed, scale, score_mod=None, mod_args=()):
    """Attention in the inputs' dtype (differentiable): O and LSE, with O = 0 and
    LSE = -inf on rows whose keys are all masked. score_mod (a name of
    score_mods.py, reading the tensors mod_args) modifies the scores after the
    scale, before the mask."""
    g = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    s = score_mods.apply(score_mod, s, mod_args)
    s = s.masked_fill(~allowed, float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    o = torch.matmul(p / torch.where(l > 0, l, torch.ones_like(l)), v)
    lse = torch.where(l > 0, torch.log(l) + m, torch.full_like(l, float("-inf")))
    return o, lse.squeeze(-1)


def max_err(got, ref):
    """max |got - ref| in float64; inf when got has NaN (poison left) or the
    infinities disagree."""
    got, ref = got.double(), ref.double()
    if torch.isnan(got).any():
        return float("inf")
    both_inf = torch.isinf(got) & torch.isinf(ref) & (got == ref)
    if (torch.isinf(got) ^ torch.isinf(ref)).any():
        return float("inf")
    d = (got - ref).abs().masked_fill(both_inf, 0)
    return d.max().item() if d.numel() else 0.0


def judge(name, got, low, ref64, results, ref_got=None, slack=0.0):
    """fa's error against ref_got (default ref64) within twice the error of
    the same math in the inputs' precision (against ref64), + 1e-5 + slack."""
    e = max_err(got, ref64 if ref_got is None else ref_got)
    base = max_err(low, ref64)
    if math.isinf(base):
        base = 0.0  # low precision overflowed; hold fa to the absolute slack
    ok = e <= 2 * base + 1e-5 + slack
    results.append({"what": name, "err": e, "math_err": base, "slack": slack, "ok": ok})
    return ok


def lse_slack(q, k, lse64, scale):
    """What fa's float32 LSE may round beyond a float32 reference's: its scores
    are float32 dot products summed by the tensor cores in D/16 steps that do
    not round to nearest, up to sqrt(D) ulps of scale * max|q| * max|k| (which
    bounds every score), and m + log(l) a few ulps of |LSE|."""
    ulp = 2.0 ** -23
    with torch.no_grad():
        qn = q.float().norm(dim=-1).max().item()
        kn = k.float().norm(dim=-1).max().item()
        finite = lse64.detach()[torch.isfinite(lse64.detach())]
        big = finite.abs().max().item() if finite.numel() else 0.0
    return ulp * (4 * big + math.sqrt(q.shape[-1]) * abs(scale) * qn * kn)


def delta_terms(q64, k64, v64, o, o64, do, allowed, scale, lse64, score_mod=None,
                mod_args=()):
    """What the backward's D = rowsum(dO∘O) adds to dQ and dK, which the
    references, differentiating their own P, do not see:
    - a shift: D reads O as the forward stored it (rounded, in the inputs'
      dtype), as the algorithm prescribes, so D moves by δD = Σ dO∘(O - O_exact)
      per row, dS = P∘(dP - D) by -P·δD, dQ by scale·(-P·δD)·K and dK by
      scale·(-P·δD)ᵀ·Q;
    - a slack: dP = dO·Vᵀ and D are f32 sums in different orders, so dP - D,
      exactly 0 where a row's P is one key, is left with a few f32 ulps
      (2^-20 here) of the size of its terms, Σ|dO∘V|; through the same
      products, with the rows' (keys') independent rounding errors adding
      as a random walk (2-norm), that estimates the error of dQ and dK.
      The kernels also round dS to the inputs' dtype (O's) for the dQ and dK
      products, half an ulp of each |dS|, added the same way: where a key
      sees one row (a one-token sequence), dK's error is that one rounding,
      which the reference in the inputs' dtype makes differently.
    With a score_mod, dS is multiplied by its derivative at each score, and P
    is that of the modified scores.
    Returns (shift of dQ, shift of dK, slack of dQ, slack of dK)."""
    with torch.no_grad():
        b, h, nq, d = q64.shape
        hkv, nk = k64.shape[1], k64.shape[2]
        g = h // hkv
        q = q64.detach()
        k, v = (t.detach().repeat_interleave(g, dim=1) for t in (k64, v64))
        dd = (do.double() * (o.double() - o64.detach())).sum(-1, keepdim=True)
        s = torch.matmul(q, k.transpose(-1, -2)) * scale
        slope = score_mods.derivative(score_mod, s, mod_args).masked_fill(~allowed, 0)
        s = score_mods.apply(score_mod, s, mod_args)
        p = torch.nan_to_num(
            torch.exp(s - lse64.detach()[..., None]).masked_fill(~allowed, 0))
        p = p * slope  # dS / d(dP - D), through the score_mod
        ds = -p * dd
        shift_q = scale * torch.matmul(ds, k)
        shift_k = scale * torch.matmul(ds.transpose(-1, -2), q)
        terms = torch.matmul(do.double().abs(), v.abs().transpose(-1, -2))
        dp = torch.matmul(do.double(), v.transpose(-1, -2))
        d64 = (do.double() * o64.detach()).sum(-1, keepdim=True)
        half_ulp = 2.0 ** -11 if o.dtype == torch.float16 else 2.0 ** -8
        w = p.abs() * terms * 2.0 ** -20 + (p * (dp - d64)).abs() * half_ulp
        slack_q = scale * (w * k.abs().amax(-1)[..., None, :]).square().sum(-1).sqrt()
        slack_k2 = (w * q.abs().amax(-1)[..., None]).square().sum(-2)
        fold = lambda t: t.view(b, hkv, g, *t.shape[2:]).sum(2)  # noqa: E731
        slack_k = scale * fold(slack_k2).sqrt()
        return (shift_q, fold(shift_k), slack_q.max().item() if slack_q.numel() else 0.0,
                slack_k.max().item() if slack_k.numel() else 0.0)


def poisoned(*shape, dtype, device):
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def random_case(rng, cfg, has_bwd, det=False):
    d = cfg["head_dim"]
    hkv = rng.choice([1, 1, 2, 3, 4])
    h = hkv * rng.choice([1, 2, 3, 4]) if rng.random() < 0.8 else hkv  # GQA/MQA/MHA
    r = rng.random()
    if r < 0.15:
        nq = 1
    elif r < 0.3:
        nq = rng.choice([63, 64, 65, 127, 128, 129])
    else:
        nq = rng.randint(2, 300)
    nk = rng.randint(1, 320) if rng.random() < 0.7 else nq
    b = rng.randint(1, 3)
    if cfg["mma"] == "wgmma" and rng.random() < 0.3:
        nq = rng.choice([255, 256, 257, 383])  # around the 128-row tiles
    if cfg["mma"] == "wgmma" and rng.random() < 0.08:
        # More query tiles than SMs: a persistent grid's CTAs take several.
        b, hkv = 2, rng.choice([1, 4, 16])
        h, nq = 16, rng.choice([1100, 2048])
        nk = rng.choice([nq, 1500])
    return {"dtype": cfg["dtype"], "d": d, "dv": cfg["head_dim_v"], "mask": cfg["mask"],
            "window": (cfg["window_left"], cfg["window_right"]), "mma": cfg["mma"],
            "b": b, "h": h, "hkv": hkv, "nq": nq, "nk": nk,
            "scale": rng.choice([None, 0.5 / math.sqrt(d), 1.3]),
            "bwd": bool(has_bwd), "bwd_mma": has_bwd or None,
            "autograd": rng.random() < 0.15, "det": det,
            # Scores that grow along the keys: every row's max moves tile after
            # tile, by more and by less than a lazy rescale absorbs.
            "ramp": rng.random() < 0.2,
            "repeat": det and rng.random() < 0.5}


def mask_kwargs(case):
    m = case["mask"]
    return {"causal": m == "causal", "causal_bottom_right": m == "causal_bottom_right",
            "window": case["window"] if m == "window" else None}


def run_case(case, gen, dev):
    dt = DTYPES[case["dtype"]]
    b, h, hkv, nq, nk, d, dv = (case[x] for x in ("b", "h", "hkv", "nq", "nk", "d", "dv"))
    q = torch.randn(b, h, nq, d, generator=gen, device=dev).to(dt)
    k = torch.randn(b, hkv, nk, d, generator=gen, device=dev).to(dt)
    v = torch.randn(b, hkv, nk, dv, generator=gen, device=dev).to(dt)
    do = torch.randn(b, h, nq, dv, generator=gen, device=dev).to(dt)
    if case.get("ramp"):
        q = (q.float() + 1).to(dt)
        ramp = 4 * torch.arange(nk, device=dev, dtype=torch.float32) / max(nk, 1)
        k = (k.float() + ramp[None, None, :, None]).to(dt)
    scale = case["scale"] if case["scale"] is not None else 1.0 / math.sqrt(d)
    allowed = allowed_mask(case["mask"], case["window"], nq, nk, dev)
    mod = case.get("score_mod")  # a name of score_mods.py, or None
    # The tensors the score_mod reads (none for most): fa gets them as
    # mod_args, the references as the function's arguments.
    mod_args = score_mods.make_mod_args(mod, b, h, hkv, nq, nk, dev, gen)
    kw = dict(mask_kwargs(case), score_mod=mod)
    if mod_args:
        kw["mod_args"] = list(mod_args)
    results = []

    # References: float64 and the same math in the inputs' precision.
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    o64, lse64 = reference(q64, k64, v64, allowed, scale, mod, mod_args)
    ql, kl, vl = (t.clone().requires_grad_() for t in (q, k, v))
    ol, _ = reference(ql, kl, vl, allowed, scale, mod, mod_args)

    o = poisoned(b, h, nq, dv, dtype=dt, device=dev)
    lse = poisoned(b, h, nq, dtype=torch.float32, device=dev)
    fa.forward_into(q, k, v, o, lse, scale=case["scale"], mma=case["mma"], **kw)
    torch.cuda.synchronize()
    judge("o", o, ol, o64, results)
    # LSE is float32 whatever the inputs' dtype: against the same math in
    # float32, with the slack of fa's float32 rounding (lse_slack).
    with torch.no_grad():
        _, lse32 = reference(q.float(), k.float(), v.float(), allowed, scale, mod, mod_args)
    judge("lse", lse, lse32, lse64, results, slack=lse_slack(q, k, lse64, scale))

    if case["bwd"]:
        o64.backward(do.double())
        ol.backward(do)
        if case["autograd"]:
            qa, ka, va = (t.clone().requires_grad_() for t in (q, k, v))
            oa = fa.attention(qa, ka, va, scale=case["scale"], mma=case["mma"],
                              deterministic=case["det"], **kw)
            oa.backward(do)
            dq, dk, dvv = qa.grad, ka.grad, va.grad
        else:
            def grads():
                dq = poisoned(*q.shape, dtype=dt, device=dev)
                dk = poisoned(*k.shape, dtype=dt, device=dev)
                dvv = poisoned(*v.shape, dtype=dt, device=dev)
                delta = poisoned(b, h, nq, dtype=torch.float32, device=dev)
                acc = poisoned(b, h, nq, d, dtype=torch.float32, device=dev)
                fa.backward_into(q, k, v, o, do, lse, dq, dk, dvv, delta, acc,
                                 scale=case["scale"], mma=case["bwd_mma"],
                                 deterministic=case["det"], **kw)
                return dq, dk, dvv
            dq, dk, dvv = grads()
            if case["repeat"]:
                # The deterministic backward: every run gives the same bits.
                bits = lambda t: t.view(torch.int16)  # noqa: E731
                same = True
                for _ in range(2):
                    again = grads()
                    same &= all(torch.equal(bits(x), bits(y))
                                for x, y in zip((dq, dk, dvv), again))
                results.append({"what": "bit-identical dq/dk/dv over 3 runs", "ok": same})
        torch.cuda.synchronize()
        shift_q, shift_k, slack_q, slack_k = delta_terms(q64, k64, v64, o, o64, do,
                                                         allowed, scale, lse64, mod, mod_args)
        judge("dq", dq, ql.grad, q64.grad, results, ref_got=q64.grad + shift_q,
              slack=slack_q)
        judge("dk", dk, kl.grad, k64.grad, results, ref_got=k64.grad + shift_k,
              slack=slack_k)
        judge("dv", dvv, vl.grad, v64.grad, results)
    return results


def record_case(report, i, case, run):
    """Runs case i (`run()` gives its results; a kernel error is a failed
    case, not a crash), adds it to report["cases"], prints it if it failed;
    returns whether it passed."""
    try:
        res = run()
    except Exception as e:
        res = [{"what": "exception", "ok": False, "message": str(e)}]
    ok = all(r["ok"] for r in res)
    report["cases"].append({"case": case, "results": res, "ok": ok})
    if not ok:
        print("FAIL case %d %s: %s" % (i, case, [r for r in res if not r["ok"]]))
    return ok


def map_slots(cfg, dev, launches=300):
    """Many forward launches of a tensor-map kernel without synchronising, on
    two streams, over inputs of three shapes: each output must equal the one
    of a launch alone (a map slot rewritten under a running kernel, or read
    before its copy, gives a different one or a fault)."""
    dt = DTYPES[cfg["dtype"]]
    d = cfg["head_dim"]
    kw = mask_kwargs({"mask": cfg["mask"], "window": (cfg["window_left"],
                                                       cfg["window_right"])})
    gen = torch.Generator(device=dev).manual_seed(1)
    sets = []
    for b, h, hkv, nq, nk in ((1, 2, 1, 130, 200), (2, 4, 2, 64, 300), (1, 3, 3, 257, 129)):
        q = torch.randn(b, h, nq, d, generator=gen, device=dev).to(dt)
        k = torch.randn(b, hkv, nk, d, generator=gen, device=dev).to(dt)
        v = torch.randn(b, hkv, nk, d, generator=gen, device=dev).to(dt)
        o = torch.empty(b, h, nq, d, dtype=dt, device=dev)
        lse = torch.empty(b, h, nq, dtype=torch.float32, device=dev)
        fa.forward_into(q, k, v, o, lse, mma=cfg["mma"], **kw)
        sets.append((q, k, v, o))
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream(device=dev), torch.cuda.Stream(device=dev)]
    outs = []
    for i in range(launches):
        q, k, v, _ = sets[i % len(sets)]
        s = streams[(i // 2) % 2]
        with torch.cuda.stream(s):
            o = torch.full(q.shape[:-1] + (d,), float("nan"), dtype=dt, device=dev)
            lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=dev)
            fa.forward_into(q, k, v, o, lse, mma=cfg["mma"], **kw)
        outs.append((i % len(sets), o))
    torch.cuda.synchronize()
    bad = sum(not torch.equal(o, sets[j][3]) for j, o in outs)
    return {"what": "map slots (%d launches, 2 streams)" % launches, "ok": bad == 0,
            "message": "%d outputs differ from a single launch's" % bad}


def expect_rejected(label, fn, expect, untouched, log):
    """fn must raise fa.FaError whose message contains `expect`, leaving the
    tensors in `untouched` all NaN (nothing was launched)."""
    try:
        fn()
    except fa.FaError as e:
        torch.cuda.synchronize()
        ok = expect in str(e) and all(torch.isnan(t).all().item() for t in untouched)
        log.append({"what": label, "ok": ok, "message": str(e)})
        return ok
    log.append({"what": label, "ok": False, "message": "accepted"})
    return False


def bad_launches(cfg, dev):
    dt = DTYPES[cfg["dtype"]]
    d, dv = cfg["head_dim"], cfg["head_dim_v"]
    kw = {"causal": cfg["mask"] == "causal",
          "causal_bottom_right": cfg["mask"] == "causal_bottom_right",
          "window": (cfg["window_left"], cfg["window_right"])
          if cfg["mask"] == "window" else None, "mma": cfg["mma"]}
    B, H, Hkv, N = 2, 4, 2, 96

    def t(*s, dtype=dt, device=dev):
        return torch.randn(*s, device=device).to(dtype)

    q, k, v = t(B, H, N, d), t(B, Hkv, N, d), t(B, Hkv, N, dv)
    o = poisoned(B, H, N, dv, dtype=dt, device=dev)
    lse = poisoned(B, H, N, dtype=torch.float32, device=dev)
    log = []
    fwd = lambda *a, **x: fa.forward_into(*a, **{**kw, **x})  # noqa: E731
    expect_rejected("wrong k shape", lambda: fwd(q, t(B + 1, Hkv, N, d), v, o, lse),
                    "k.shape is", [o, lse], log)
    expect_rejected("v length differs from k", lambda: fwd(q, k, t(B, Hkv, N + 1, dv), o, lse),
                    "v.shape is", [o, lse], log)
    expect_rejected("H % Hkv", lambda: fwd(q, t(B, 3, N, d), t(B, 3, N, dv), o, lse),
                    "multiple of the key head count", [o, lse], log)
    expect_rejected("wrong o shape", lambda: fwd(q, k, v, poisoned(B, H, N - 1, dv, dtype=dt,
                                                                   device=dev), lse),
                    "o.shape is", [o, lse], log)
    # Rows of D elements need 2*gcd(D, 8)-byte alignment (16 for multiples
    # of 8); one element off is misaligned unless D is odd.
    if d % 2 == 0:
        flat = t(B * H * N * d + 8)
        misaligned = flat[1:1 + B * H * N * d].view(B, H, N, d)
        expect_rejected("misaligned q", lambda: fwd(misaligned, k, v, o, lse),
                        "is not %d-byte aligned" % (2 * math.gcd(d, 8)), [o, lse], log)
    expect_rejected("CPU tensor", lambda: fwd(q, k.cpu(), v, o, lse),
                    "k.data", [o, lse], log)
    if cfg.get("strided"):
        # Any strides with a unit last one are taken (test_strided.py); a
        # column-major q is not.
        expect_rejected("q with a non-unit last stride", lambda: fwd(
            q.transpose(2, 3).contiguous().transpose(2, 3), k, v, o, lse),
            "the last dimension's stride must be 1", [o, lse], log)
    else:
        expect_rejected("non-contiguous q", lambda: fwd(
            q.transpose(1, 2).contiguous().transpose(1, 2), k, v, o, lse),
            "contiguous row-major", [o, lse], log)
    other = torch.float16 if dt == torch.bfloat16 else torch.bfloat16
    expect_rejected("mixed dtype", lambda: fwd(q, k.to(other), v, o, lse),
                    "k.dtype is", [o, lse], log)
    expect_rejected("lse dtype", lambda: fwd(q, k, v, o, poisoned(B, H, N, dtype=dt,
                                                                   device=dev)),
                    "lse.dtype is", [o, lse], log)
    expect_rejected("zero scale", lambda: fwd(q, k, v, o, lse, scale=0.0),
                    "finite and non-zero", [o, lse], log)
    expect_rejected("nan scale", lambda: fwd(q, k, v, o, lse, scale=float("nan")),
                    "finite and non-zero", [o, lse], log)
    if d == dv:  # o must have q's shape to alias it
        expect_rejected("o aliases q", lambda: fwd(q, k, v, q, lse), "overlaps q", [o, lse],
                        log)
    # The bundle has no kernel for D = 36 without a mask.
    expect_rejected("no such kernel", lambda: fa.attention(t(1, 1, 8, 36), t(1, 1, 8, 36),
                                                           t(1, 1, 8, 36)),
                    "has no kernel for", [], log)
    return log


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None, help="libfa_runtime.so")
    ap.add_argument("--cases", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write results here")
    ap.add_argument("--progress", action="store_true", help="print each case before running it")
    ap.add_argument("--mma", choices=["any", "mma_sync", "wgmma"], default="any",
                    help="test only forward kernels built on these instructions")
    args = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False  # the float32 LSE reference
    dev = torch.device("cuda")
    torch.cuda.init()
    bundle = fa.load(args.bundle, args.lib)
    # score_mod kernels are test_score_mod.py's (it runs this file's cases
    # with a score_mod); here only plain attention. Split-KV kernels serve
    # fa.attention's decode calls beside a plain kernel of their config.
    kernels = [k for k in bundle.kernels() if not k.get("score_mod") and not k.get("split_kv")]
    fwd_cfgs = [k for k in kernels if k["direction"] == "fwd" and
                args.mma in ("any", k["mma"])]
    bwd_builds = {(k["dtype"], k["head_dim"], k["head_dim_v"], k["mask"], k["window_left"],
                   k["window_right"], k["mma"]) for k in kernels if k["direction"] == "bwd"}
    bwd_keys = {b[:-1] for b in bwd_builds}
    det_keys = {(k["dtype"], k["head_dim"], k["head_dim_v"], k["mask"], k["window_left"],
                 k["window_right"]) for k in kernels
                if k["direction"] == "bwd" and k.get("deterministic")}
    if not fwd_cfgs:
        print("FAIL: the bundle has no forward kernels (mma %s)" % args.mma)
        return 1
    # One entry per distinct configuration (several targets may share one).
    seen, cfgs = set(), []
    for c in fwd_cfgs:
        key = (c["dtype"], c["head_dim"], c["head_dim_v"], c["mask"], c["window_left"],
               c["window_right"])
        if key + (c["mma"],) not in seen:
            seen.add(key + (c["mma"],))
            # The backward of a forward config runs the build of the same
            # instructions where the bundle has one, so both are tested.
            bwd_mma = c["mma"] if key + (c["mma"],) in bwd_builds else "any"
            cfgs.append((c, key in bwd_keys and bwd_mma, False))
            # The deterministic backward as a config of its own (the forward
            # is the same kernel).
            if key in det_keys and c["mma"] == "wgmma":
                cfgs.append((c, "wgmma", True))
    print("bundle %s: %d kernels, %d forward configs (%d with backward, %d deterministic)" %
          (args.bundle, len(kernels), len(cfgs), sum(bool(b) for _, b, _ in cfgs),
           sum(det for _, _, det in cfgs)))

    rng = random.Random(args.seed)
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    report = {"bundle": args.bundle, "cases": [], "bad_launches": []}
    failures = 0
    t0 = time.time()
    for i in range(max(args.cases, len(cfgs))):
        cfg, has_bwd, det = cfgs[i % len(cfgs)]  # round-robin covers every config
        case = random_case(rng, cfg, has_bwd, det)
        if args.progress:  # a hung kernel then names its case
            print("case %d %s" % (i, case), flush=True)
        failures += not record_case(report, i, case, lambda: run_case(case, gen, dev))
    n = len(report["cases"])
    print("differential: %d/%d cases passed in %.1f s" % (n - failures, n, time.time() - t0))
    worst = {}
    for c in report["cases"]:
        for r in c["results"]:
            if "err" in r:
                tol = 2 * r["math_err"] + 1e-5 + r["slack"]
                worst[r["what"]] = max(worst.get(r["what"], 0), r["err"] / tol)
    print("worst err / tolerance per output: " +
          ", ".join("%s %.2f" % kv for kv in sorted(worst.items())))

    for cfg in [c for c, _, _ in cfgs if c["tensor_maps"]][:1]:
        try:
            r = map_slots(cfg, dev)
        except Exception as e:
            r = {"what": "map slots", "ok": False, "message": str(e)}
        report["bad_launches"].append(r)
        print("%s %s (%s): %s" % ("ok  " if r["ok"] else "FAIL", r["what"], cfg["tag"],
                                  r["message"]))
        failures += not r["ok"]
    first = {}  # one config per mma
    for c, _, _ in cfgs:
        first.setdefault(c["mma"], c)
    for cfg in first.values():
        log = bad_launches(cfg, dev)
        report["bad_launches"] += log
        for r in log:
            print("%s bad launch '%s': %s" % ("ok  " if r["ok"] else "FAIL", r["what"],
                                               r["message"].splitlines()[0][:160]))
            failures += not r["ok"]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
    print("RESULT: %s" % ("PASS" if failures == 0 else "FAIL (%d)" % failures))
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
