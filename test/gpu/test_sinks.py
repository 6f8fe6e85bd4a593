#!/usr/bin/env python3
"""Differential GPU test of the attention-sink kernels (H200 only, never CI).

Every kernel of the bundle with sinks (forward and backward, mma.sync and
wgmma, every dtype, head dim, mask, score_mod and mask_mod it has; the mods'
tensors drawn by score_mods.make_mod_args and test_maskmod's mask_mod_arg)
is launched directly through
fa_attention_{forward,backward}_sinks on random cases: B 1-3, H/Hkv with
GQA/MQA, ragged Nq != Nk (rows whose keys are all masked included: only their
sink sees them), sinks per head drawn from N(0, 2), dominant ones (+8, which
take nearly all of a row) and -inf (no sink). A float64 reference with the
sink as one more logit without a value gives O, LSE and, by autograd, dQ, dK,
dV and d_sinks. The rule is the flash-attn one of test_attention.py:
max|fa - ref64| <= 2 * max|same math in the inputs' dtype - ref64| + 1e-5
(LSE against float32 math plus lse_slack; dQ/dK with delta_terms' shift and
slack for D read from the stored O, d_sinks likewise shifted by
-sum e^(sink - LSE)·dO·(O_stored - O)). Outputs are NaN-poisoned first.
d_sinks must be bit-identical over 3 runs (fixed-order reduction), plain
launches of sink kernels must be refused, and fa.attention(..., sinks=t)
with autograd must give the same O and t.grad as the direct launches.

Built on the development machine (MLIR is not on the GPU machine):
    build/bin/fa-aot --config-file test/gpu/configs_sinks.txt \
        --score-mods test/gpu/score_mods.mlir -o out/bundle-sinks
and, for sinks with mask_mods (the same test on that bundle):
    build/bin/fa-aot --config-file test/gpu/configs_sinks_maskmod.txt \
        --score-mods test/gpu/mask_mods.mlir -o out/bundle-sinks-maskmod
Then, on the GPU machine:
    python3 test/gpu/test_sinks.py --bundle out/bundle-sinks --lib <libfa_runtime.so>
"""
import argparse
import ctypes
import json
import math
import os
import random
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from fa import _tensor  # noqa: E402
from fa._runtime import BWD, FWD, BackwardArgs, ForwardArgs  # noqa: E402
import score_mods  # noqa: E402
from test_maskmod import mask_mod_allowed, mask_mod_arg  # noqa: E402
from test_attention import (DTYPES, allowed_mask, delta_terms, judge, lse_slack,  # noqa: E402
                            poisoned)


def reference(q, k, v, sinks, allowed, scale, mod=None, mod_args=()):
    """O and LSE in the inputs' dtype (differentiable in q, k, v, sinks): the
    sink of head h is one more logit of every row, without a value; score_mod
    `mod` applies to the scores, not to the sink."""
    b, h, nq, _ = q.shape
    g = h // k.shape[1]
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    s = score_mods.apply(mod, s, mod_args).masked_fill(~allowed, float("-inf"))
    sink = sinks.to(s.dtype).view(1, h, 1, 1).expand(b, h, nq, 1)
    full = torch.cat([s, sink], dim=-1)
    m = full.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    p = torch.exp(full - m)
    l = p.sum(-1, keepdim=True)
    o = torch.matmul(p[..., :-1] / torch.where(l > 0, l, torch.ones_like(l)), v)
    lse = torch.where(l > 0, torch.log(l) + m, torch.full_like(l, float("-inf")))
    return o, lse.squeeze(-1)


def random_sinks(rng, h, dev):
    vals = []
    for _ in range(h):
        r = rng.random()
        vals.append(float("-inf") if r < 0.15 else 8.0 if r < 0.3 else rng.gauss(0, 2))
    return torch.tensor(vals, dtype=torch.float32, device=dev)


def kernel_mod_args(info, b, h, hkv, nq, nk, rng, gen, dev):
    """(the score_mod's tensors, all the kernel's mod_args, the mask_mod's
    [B, 1, Nq, Nk] keep mask or None) for a problem of these sizes: the
    mask_mod's tensor after the score_mod's."""
    mod, mask_mod = info["score_mod"], info["mask_mod"]
    mods = tuple(score_mods.make_mod_args(mod, b, h, hkv, nq, nk, dev, gen)) if mod else ()
    if not mask_mod:
        return mods, mods, None
    arg = mask_mod_arg(mask_mod, b, nq, nk, rng, dev)
    return mods, mods + (arg,), mask_mod_allowed(mask_mod, arg, b, nq, nk, dev)


def random_case(rng, cfg):
    hkv = rng.choice([1, 1, 2, 3, 4])
    h = hkv * rng.choice([1, 2, 3, 4]) if rng.random() < 0.8 else hkv
    nq = rng.choice([1, 63, 64, 65, 127, 129, 255, 257, rng.randint(2, 400)])
    nk = rng.randint(1, 400) if rng.random() < 0.7 else nq
    return {"tag": cfg["tag"], "dtype": cfg["dtype"], "d": cfg["head_dim"],
            "dv": cfg["head_dim_v"], "mask": cfg["mask"],
            "window": (cfg["window_left"], cfg["window_right"]),
            "b": rng.randint(1, 3), "h": h, "hkv": hkv, "nq": nq, "nk": nk,
            "scale": rng.choice([None, 1.3]), "score_mod": cfg["score_mod"],
            "mask_mod": cfg["mask_mod"]}


class Launcher:
    """Direct launches of one kernel of the bundle through the C API."""

    def __init__(self, bundle, kernel, mod_args=()):
        self.lib, self.kernel, self.mod_args = bundle.lib, kernel, mod_args

    def _call(self, fn, args, *extra):
        stream = torch.cuda.current_stream().cuda_stream
        status = fn(self.kernel, ctypes.byref(args), fa._mod_arg_array(self.mod_args),
                    len(self.mod_args), *extra, stream)
        if status:
            raise fa.FaError(status, self.lib.fa_last_error().decode())

    def forward(self, q, k, v, o, lse, sinks, scale):
        args = ForwardArgs(*[_tensor(t) for t in (q, k, v, o, lse)], scale)
        self._call(self.lib.fa_attention_forward_sinks, args, ctypes.byref(_tensor(sinks)))

    def backward(self, q, k, v, o, do, lse, sinks, scale):
        dq, dk, dv = (poisoned(*t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))
        delta = poisoned(*q.shape[:-1], dtype=torch.float32, device=q.device)
        accum = poisoned(*q.shape, dtype=torch.float32, device=q.device)
        ds = poisoned(sinks.shape[0], dtype=torch.float32, device=q.device)
        args = BackwardArgs(*[_tensor(t) for t in (q, k, v, o, do, lse, dq, dk, dv, delta,
                                                     accum)], scale)
        self._call(self.lib.fa_attention_backward_sinks, args, ctypes.byref(_tensor(sinks)),
                   ctypes.byref(_tensor(ds)))
        return dq, dk, dv, ds


def sink_terms(o, o64, do, lse64, sinks):
    """d_sinks' shift from D read off the stored O, and an f32 slack for D's
    and the per-head sum's rounding (2^-20 of the terms' magnitudes)."""
    with torch.no_grad():
        p = torch.exp(sinks.double().view(1, -1, 1) - lse64.detach())
        p = torch.nan_to_num(p.masked_fill(torch.isinf(lse64.detach()), 0))
        dd = (do.double() * (o.double() - o64.detach())).sum(-1)
        shift = -(p * dd).sum((0, 2))
        mag = (p * (do.double() * o.double()).abs().sum(-1)).sum((0, 2))
        return shift, (mag.max().item() if mag.numel() else 0.0) * 2.0 ** -20


def run(case, fwd, bwd, b, gen, rng, dev, results):
    dt = DTYPES[case["dtype"]]
    bb, h, hkv, nq, nk, d, dv = (case[x] for x in ("b", "h", "hkv", "nq", "nk", "d", "dv"))
    scale = 1.0 / math.sqrt(d) if case["scale"] is None else case["scale"]
    q = torch.randn(bb, h, nq, d, generator=gen, device=dev).to(dt)
    k = torch.randn(bb, hkv, nk, d, generator=gen, device=dev).to(dt)
    v = torch.randn(bb, hkv, nk, dv, generator=gen, device=dev).to(dt)
    do = torch.randn(bb, h, nq, dv, generator=gen, device=dev).to(dt)
    sinks = random_sinks(rng, h, dev)
    mod = case["score_mod"]
    mods, kernel_mods, keep = kernel_mod_args(case, bb, h, hkv, nq, nk, rng, gen, dev)
    allowed = allowed_mask(case["mask"], case["window"], nq, nk, dev)
    if keep is not None:
        allowed = allowed & keep
    o = poisoned(bb, h, nq, dv, dtype=dt, device=dev)
    lse = poisoned(bb, h, nq, dtype=torch.float32, device=dev)
    Launcher(b, fwd, kernel_mods).forward(q, k, v, o, lse, sinks, scale)
    torch.cuda.synchronize()
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    s64 = sinks.double().requires_grad_()
    mods64 = [t.double() for t in mods]
    o64, lse64 = reference(q64, k64, v64, s64, allowed, scale, mod, mods64)
    ql, kl, vl = (t.detach().clone().requires_grad_() for t in (q, k, v))
    sl = sinks.detach().clone().requires_grad_()
    ol, _ = reference(ql, kl, vl, sl, allowed, scale, mod, mods)
    _, lse32 = reference(q.float(), k.float(), v.float(), sinks, allowed, scale, mod, mods)
    name = case["tag"]
    judge(name + " o", o, ol, o64, results)
    judge(name + " lse", lse, lse32, lse64, results, slack=lse_slack(q, k, lse64, scale))
    if bwd is None:
        return
    launcher = Launcher(b, bwd, kernel_mods)
    dq, dk, dvv, ds = launcher.backward(q, k, v, o, do, lse, sinks, scale)
    torch.cuda.synchronize()
    o64.backward(do.double())
    ol.backward(do)
    shift_q, shift_k, slack_q, slack_k = delta_terms(q64, k64, v64, o, o64, do, allowed, scale,
                                                     lse64, mod, mods64)
    name = b._info(bwd)["tag"]
    judge(name + " dq", dq, ql.grad, q64.grad, results, ref_got=q64.grad + shift_q,
          slack=slack_q)
    judge(name + " dk", dk, kl.grad, k64.grad, results, ref_got=k64.grad + shift_k,
          slack=slack_k)
    judge(name + " dv", dvv, vl.grad, v64.grad, results)
    shift_s, slack_s = sink_terms(o, o64, do, lse64, sinks)
    # -inf sinks have no gradient: fa writes 0 there, the references NaN or 0.
    live = torch.isfinite(sinks)
    ref_s = torch.where(live, s64.grad, torch.zeros_like(s64.grad))
    low_s = torch.where(live, sl.grad, torch.zeros_like(sl.grad))
    judge(name + " d_sinks", ds, low_s, ref_s, results, ref_got=ref_s + shift_s,
          slack=slack_s)
    again = [launcher.backward(q, k, v, o, do, lse, sinks, scale)[3] for _ in range(2)]
    same = all(torch.equal(ds.view(torch.int32), x.view(torch.int32)) for x in again)
    results.append({"what": name + " d_sinks bit-identical over 3 runs", "ok": same})


def check_refusals(b, fwd, bwd, dev, results):
    """The plain launches refuse sink kernels; the _sinks ones refuse a bad
    sinks tensor; nothing is written."""
    dt = DTYPES[b._info(fwd)["dtype"]]
    info = b._info(fwd)
    d = info["head_dim"]
    q = torch.randn(1, 4, 70, d, device=dev).to(dt)
    o = poisoned(1, 4, 70, info["head_dim_v"], dtype=dt, device=dev)
    lse = poisoned(1, 4, 70, dtype=torch.float32, device=dev)
    args = ForwardArgs(*[_tensor(t) for t in (q, q, q, o, lse)], 0.1)
    _, mods, _ = kernel_mod_args(info, 1, 4, 4, 70, 70, random.Random(3), None, dev)
    stream = torch.cuda.current_stream().cuda_stream
    # A mod kernel through the _ex launch with its mod_args: only the sinks
    # are missing.
    status = (b.lib.fa_attention_forward_ex(fwd, ctypes.byref(args), fa._mod_arg_array(mods),
                                            len(mods), stream) if mods else
              b.lib.fa_attention_forward(fwd, ctypes.byref(args), stream))
    msg = b.lib.fa_last_error().decode()
    results.append({"what": "plain launch of a sink kernel refused", "msg": msg,
                    "ok": status == 1 and "has attention sinks" in msg})
    short = torch.zeros(3, device=dev)
    try:
        Launcher(b, fwd, mods).forward(q, q, q, o, lse, short, 0.1)
        ok = False
    except fa.FaError as e:
        ok = "sinks.shape is [3], expected [4]" in str(e)
    torch.cuda.synchronize()
    ok &= bool(torch.isnan(o).all())
    results.append({"what": "short sinks refused, o untouched", "ok": ok})


def check_api(b, fwd_cfg, dev, results):
    """fa.attention(..., sinks=t) with autograd: O, LSE, dQ and t.grad
    bit-identical to direct launches of the kernels its searches pick (the
    direct launches are held to the float64 rule in run()); bad sinks raise
    FaError."""
    dt = DTYPES[fwd_cfg["dtype"]]
    d, mask = fwd_cfg["head_dim"], fwd_cfg["mask"]
    win = (fwd_cfg["window_left"], fwd_cfg["window_right"])
    gen = torch.Generator(device=dev).manual_seed(3)
    q, k, v = (torch.randn(2, 4, 150, d, generator=gen, device=dev).to(dt).requires_grad_()
               for _ in range(3))
    t = torch.tensor([0.5, float("-inf"), 3.0, -1.0], device=dev, requires_grad=True)
    mod, mask_mod = fwd_cfg["score_mod"], fwd_cfg["mask_mod"]
    _, mods, _ = kernel_mod_args(fwd_cfg, 2, 4, 4, 150, 150, random.Random(5), gen, dev)
    kw = {"causal": mask == "causal", "causal_bottom_right": mask == "causal_bottom_right",
          "window": win if mask == "window" else None, "score_mod": mod,
          "mask_mod": mask_mod, "mod_args": list(mods) or None}
    o, lse = fa.attention(q, k, v, sinks=t, bundle=b, return_lse=True, mma=fwd_cfg["mma"],
                          **kw)
    do = torch.randn(o.shape, generator=gen, device=dev).to(dt)
    o.backward(do)
    cap = fa._capability(q)
    fk = b.find(FWD, fwd_cfg["dtype"], d, d, mask, win, cap,
                fwd_cfg["mma"], 150, score_mod=mod, mask_mod=mask_mod, sinks=True)
    bk = b.find(BWD, fwd_cfg["dtype"], d, d, mask, win, cap, None, 150, score_mod=mod,
                mask_mod=mask_mod, sinks=True)
    scale = 1 / math.sqrt(d)
    qd, kd, vd = (x.detach() for x in (q, k, v))
    o2 = poisoned(*o.shape, dtype=dt, device=dev)
    lse2 = poisoned(*lse.shape, dtype=torch.float32, device=dev)
    Launcher(b, fk, mods).forward(qd, kd, vd, o2, lse2, t.detach(), scale)
    dq, _, _, ds = Launcher(b, bk, mods).backward(qd, kd, vd, o2, do, lse2, t.detach(), scale)
    torch.cuda.synchronize()
    ok = (torch.equal(o.detach(), o2) and torch.equal(lse, lse2) and torch.equal(q.grad, dq)
          and t.grad is not None and torch.equal(t.grad, ds))
    results.append({"what": "fa.attention(sinks=t) autograd == direct launches (%s, %s)"
                    % (b._info(fk)["tag"], b._info(bk)["tag"]), "ok": ok})
    for bad, text in ((torch.zeros(4, dtype=torch.float16, device=dev), "sinks.dtype"),
                      (torch.zeros(5, device=dev), "sinks.shape is [5], expected [4]"),
                      (torch.zeros(4), "expected one CUDA device")):
        try:
            fa.attention(q, k, v, sinks=bad, bundle=b, **kw)
            results.append({"what": "bad sinks " + text, "ok": False})
        except fa.FaError as e:
            results.append({"what": "bad sinks " + text, "ok": text in str(e)})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bundle", required=True)
    p.add_argument("--lib", required=True)
    p.add_argument("--cases", type=int, default=8, help="random cases per kernel")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json")
    a = p.parse_args()
    dev = torch.device("cuda")
    b = fa.Bundle(a.bundle, lib_path=a.lib, jit=False)
    handle = b._handles[0]
    kernels = [(b.lib.fa_bundle_kernel_at(handle, i), None)
               for i in range(b.lib.fa_bundle_kernel_count(handle))]
    kernels = [(k, b._info(k)) for k, _ in kernels]
    kernels = [(k, i) for k, i in kernels if i["sinks"]]
    fwds = [(k, i) for k, i in kernels if i["direction"] == "fwd"]
    bwds = [(k, i) for k, i in kernels if i["direction"] == "bwd"]
    rng = random.Random(a.seed)
    gen = torch.Generator(device=dev).manual_seed(a.seed)
    results = []
    same = lambda x, y: all(x[f] == y[f] for f in ("dtype", "head_dim", "head_dim_v", "mask",  # noqa: E731
                                                   "window_left", "window_right", "score_mod",
                                                   "mask_mod"))
    # Every forward, with each backward of its problem (both families); a
    # backward without a forward of its problem uses the first forward of its
    # dtype and head dim (its mask then checks the forward only).
    pairs = []
    for fk, fi in fwds:
        mine = [(bk, bi) for bk, bi in bwds if same(fi, bi)]
        pairs += [(fk, fi, bk) for bk, _ in mine] or [(fk, fi, None)]
    for bk, bi in bwds:
        if not any(same(fi, bi) for _, fi in fwds):
            print("no forward for", bi["tag"], "(skipped)")
    for fk, fi, bk in pairs:
        for _ in range(a.cases):
            case = random_case(rng, fi)
            before = len(results)
            try:
                run(case, fk, bk, b, gen, rng, dev, results)
            except Exception as e:  # noqa: BLE001 (report and go on)
                results.append({"what": fi["tag"], "error": repr(e), "ok": False})
            for r in results[before:]:
                r["case"] = {x: case[x] for x in ("b", "h", "hkv", "nq", "nk")}
                if not r["ok"]:
                    print("FAIL", r)
    if fwds:
        check_refusals(b, fwds[0][0], bwds[0][0] if bwds else None, dev, results)
        for _, fi in fwds:
            if fi["mma"] == "wgmma" or fi["score_mod"] or fi["mask_mod"] or fi is fwds[0][1]:
                check_api(b, fi, dev, results)
    for r in results[-8:]:
        if not r["ok"]:
            print("FAIL", r)
    failed = sum(not r["ok"] for r in results)
    print("test_sinks: %d forward kernels, %d backward kernels, %d checks: %d passed, %d failed"
          % (len(fwds), len(bwds), len(results), len(results) - failed, failed))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    sys.exit(1 if failed or not fwds or not bwds else 0)


if __name__ == "__main__":
    main()
