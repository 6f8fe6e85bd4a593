#!/usr/bin/env python3
"""Differential tests of mask_mod kernels (document masks, prefix-LM) on the
GPU through the runtime (fa.forward_into / fa.backward_into with mask_mod= and
mod_args=), forward and backward, against float64 under the flash-attn rule
(test_attention.py's references and judge): random shapes with ragged tails,
GQA, Nq != Nk, doc ids [B, max(Nq, Nk)] of 1-8 documents of random lengths
(rows whose document starts after them see nothing under causal masks), prefix
lengths [B] in [0, Nk]. It also checks the lookup: a query without a mask_mod
never gets a mask_mod kernel where the bundle has both.

Built on the development machine (MLIR is not on the GPU machine):
    build/bin/fa-aot --config-file test/gpu/configs_maskmod.txt \\
        --score-mods test/gpu/mask_mods.mlir -o out/bundle-maskmod
Then, on the GPU machine:
    python3 test/gpu/test_maskmod.py --bundle out/bundle-maskmod --lib <libfa_runtime.so>
"""
import argparse
import json
import os
import random
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from fa._runtime import FWD  # noqa: E402
from test_attention import (DTYPES, allowed_mask, delta_terms, judge, lse_slack,  # noqa: E402
                            mask_kwargs, poisoned, reference)


def mask_mod_arg(name, b, nq, nk, rng, dev):
    """The tensor the mask_mod reads: doc ids [B, max(Nq, Nk)] (i32) or
    prefix lengths [B] (i32)."""
    if name == "document":
        n = max(nq, nk)
        ids = torch.zeros(b, n, dtype=torch.int32)
        for row in range(b):
            for _ in range(rng.randint(0, 7)):
                ids[row, rng.randint(0, n):] += 1
        return ids.to(dev)
    return torch.tensor([rng.randint(0, nk) for _ in range(b)], dtype=torch.int32, device=dev)


def mask_mod_allowed(name, arg, b, nq, nk, dev):
    """[B, 1, Nq, Nk] bool: what the mask_mod keeps."""
    i = torch.arange(nq, device=dev).view(1, nq, 1)
    j = torch.arange(nk, device=dev).view(1, 1, nk)
    if name == "document":
        keep = arg[:, :nq].view(b, nq, 1) == arg[:, :nk].view(b, 1, nk)
    else:
        keep = (j < arg.view(b, 1, 1)) | (j <= i)
    return keep.unsqueeze(1)


def run_case(case, rng, gen, dev):
    dt = DTYPES[case["dtype"]]
    b, h, hkv, nq, nk, d, dv = (case[x] for x in ("b", "h", "hkv", "nq", "nk", "d", "dv"))
    q = torch.randn(b, h, nq, d, generator=gen, device=dev).to(dt)
    k = torch.randn(b, hkv, nk, d, generator=gen, device=dev).to(dt)
    v = torch.randn(b, hkv, nk, dv, generator=gen, device=dev).to(dt)
    do = torch.randn(b, h, nq, dv, generator=gen, device=dev).to(dt)
    scale = d ** -0.5
    arg = mask_mod_arg(case["mask_mod"], b, nq, nk, rng, dev)
    allowed = (allowed_mask(case["mask"], case["window"], nq, nk, dev)
               & mask_mod_allowed(case["mask_mod"], arg, b, nq, nk, dev))
    kw = dict(mask_kwargs(case), mask_mod=case["mask_mod"], mod_args=[arg], mma=case["mma"])
    results = []
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    o64, lse64 = reference(q64, k64, v64, allowed, scale)
    ql, kl, vl = (t.clone().requires_grad_() for t in (q, k, v))
    ol, _ = reference(ql, kl, vl, allowed, scale)
    o = poisoned(b, h, nq, dv, dtype=dt, device=dev)
    lse = poisoned(b, h, nq, dtype=torch.float32, device=dev)
    fa.forward_into(q, k, v, o, lse, **kw)
    torch.cuda.synchronize()
    judge("o", o, ol, o64, results)
    with torch.no_grad():
        _, lse32 = reference(q.float(), k.float(), v.float(), allowed, scale)
    judge("lse", lse, lse32, lse64, results, slack=lse_slack(q, k, lse64, scale))
    empty = ~allowed.expand(b, h, nq, nk).any(-1)
    if empty.any():
        ok = bool(torch.isneginf(lse[empty]).all()) and o[empty].abs().max().item() == 0
        results.append({"what": "rows without keys: O = 0, LSE = -inf", "ok": ok})
    if case["bwd"]:
        o64.backward(do.double())
        ol.backward(do)
        dq = poisoned(*q.shape, dtype=dt, device=dev)
        dk = poisoned(*k.shape, dtype=dt, device=dev)
        dvv = poisoned(*v.shape, dtype=dt, device=dev)
        fa.backward_into(q, k, v, o, do, lse, dq, dk, dvv, **kw)
        torch.cuda.synchronize()
        shift_q, shift_k, slack_q, slack_k = delta_terms(q64, k64, v64, o, o64, do, allowed,
                                                         scale, lse64)
        judge("dq", dq, ql.grad, q64.grad, results, ref_got=q64.grad + shift_q, slack=slack_q)
        judge("dk", dk, kl.grad, k64.grad, results, ref_got=k64.grad + shift_k, slack=slack_k)
        judge("dv", dvv, vl.grad, v64.grad, results)
    return results


def random_case(rng, fwd, has_bwd):
    hkv = rng.choice([1, 2, 4])
    h = hkv * rng.choice([1, 2, 4])
    nq = rng.choice([1, 63, 64, 65, 129, rng.randint(2, 600), 1024])
    nk = nq if rng.random() < 0.6 else rng.randint(1, 700)
    return {"dtype": fwd["dtype"], "d": fwd["head_dim"], "dv": fwd["head_dim_v"],
            "mask": fwd["mask"], "window": (fwd["window_left"], fwd["window_right"]),
            "mma": fwd["mma"], "mask_mod": fwd["mask_mod"], "b": rng.randint(1, 3),
            "h": h, "hkv": hkv, "nq": nq, "nk": nk, "bwd": has_bwd}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--cases", type=int, default=16, help="cases per forward kernel")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    dev = torch.device("cuda")
    bundle = fa.load(args.bundle, args.lib, jit=False)
    kernels = bundle.kernels()
    fwds = [k for k in kernels if k["mask_mod"] and k["direction"] == "fwd"
            and not k["split_kv"] and not k["score_mod"]]
    if not fwds:
        sys.exit("no mask_mod forward kernels in %s" % args.bundle)
    rng = random.Random(7)
    gen = torch.Generator(device=dev).manual_seed(7)
    failed = total = 0
    log = []
    for fwd in fwds:
        has_bwd = any(k["direction"] == "bwd" and k["mask_mod"] == fwd["mask_mod"]
                      and k["dtype"] == fwd["dtype"] and k["head_dim"] == fwd["head_dim"]
                      and k["mask"] == fwd["mask"] and k["mma"] == fwd["mma"]
                      for k in kernels)
        for n in range(args.cases):
            case = random_case(rng, fwd, has_bwd)
            results = run_case(case, rng, gen, dev)
            bad = [r for r in results if not r["ok"]]
            total += 1
            failed += bool(bad)
            line = "%s %s B%d H%d/%d Nq%d Nk%d%s: %s" % (
                fwd["tag"], case["mask_mod"], case["b"], case["h"], case["hkv"], case["nq"],
                case["nk"], " +bwd" if has_bwd else "",
                "FAIL " + "; ".join("%s %s" % (r["what"], r.get("err", "")) for r in bad)
                if bad else "ok")
            print(line, flush=True)
            log.append({"case": case, "results": results})
    # A plain query never gets a mask_mod kernel.
    f = fwds[0]
    try:
        plain = bundle.find(FWD, f["dtype"], f["head_dim"], f["head_dim_v"], f["mask"],
                            (f["window_left"], f["window_right"]), 90)
        plain_ok = bundle._info(plain)["mask_mod"] is None
    except fa.FaError:
        plain_ok = True  # no plain kernel for it: none served either
    total += 1
    failed += not plain_ok
    print("plain query gets no mask_mod kernel: %s" % ("ok" if plain_ok else "FAIL"))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(log, fh, default=str)
    print("mask_mod: %d of %d cases passed" % (total - failed, total))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
