#!/usr/bin/env python3
"""Ring attention's schedule on one GPU (H200 only, never CI).

fa.distributed.ring_attention_simulated runs, for every rank of a ring of W,
the steps ring_attention runs on W GPUs: each rank's queries against the key
chunk it holds at each step (fa's forward and backward kernels on the slices
fa.distributed.step_blocks names), partials merged by LSE, dK and dV carried
with their chunk. The ranks' outputs put back together are judged against a
float64 reference of the whole sequence by test_attention's rule (the
flash-attn suite's: err <= 2 x err of the same math in the inputs' dtype +
1e-5; dQ and dK against the reference shifted by what Delta = rowsum(dO∘O)
reads from the stored O; the gradients with a slack of half an ulp per
partial the ring adds, since fa's backward returns each in the inputs' dtype), over W in {1, 2, 3, 4, 8}, both layouts, causal and
not, GQA, bf16 and f16, d 64 and 128, local lengths that are and are not
multiples of the kernels' tiles. Also checks that fa on the whole sequence
meets the same rule (the baseline the ring must match) and that the shard /
unshard helpers are inverse.

    python3 test/gpu/test_ring.py --bundle out/bundle --lib <libfa_runtime.so>
"""
import argparse
import itertools
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa  # noqa: E402
import fa.distributed as fad  # noqa: E402
from test_attention import allowed_mask, delta_terms, judge, lse_slack, reference  # noqa: E402


def cases(bundle):
    """Every combination whose forward and backward kernels (no mask and
    causal) the bundle has."""
    have = {(k["direction"], k["dtype"], k["head_dim"], k["mask"]) for k in bundle.kernels()
            if k["head_dim"] == k["head_dim_v"] and not k.get("score_mod")}
    worlds = (1, 2, 3, 4, 8)
    for world, layout, causal, dtype, d in itertools.product(
            worlds, fad.LAYOUTS, (False, True), ("bf16", "f16"), (64, 128)):
        if world == 1 and layout == "contiguous":
            continue  # the same as zigzag with one rank
        if not all((dr, dtype, d, m) in have for dr in ("fwd", "bwd") for m in ("none", "causal")):
            continue
        for n_local in (96, 128):
            yield dict(world=world, layout=layout, causal=causal, dtype=dtype, d=d,
                       n_local=n_local, b=1 + (world % 2), h=4, hkv=2 if d == 128 else 4)


def run_case(c, gen, dev):
    dt = {"bf16": torch.bfloat16, "f16": torch.float16}[c["dtype"]]
    w, n = c["world"], c["world"] * c["n_local"]
    b, h, hkv, d = c["b"], c["h"], c["hkv"], c["d"]
    q = torch.randn(b, h, n, d, generator=gen, device=dev).to(dt)
    k = torch.randn(b, hkv, n, d, generator=gen, device=dev).to(dt)
    v = torch.randn(b, hkv, n, d, generator=gen, device=dev).to(dt)
    do = torch.randn(b, h, n, d, generator=gen, device=dev).to(dt)
    scale = d ** -0.5
    part = lambda t: [fad.shard(t, r, w, c["layout"]) for r in range(w)]  # noqa: E731
    outs, lses, dqs, dks, dvs = fad.ring_attention_simulated(
        part(q), part(k), part(v), causal=c["causal"], layout=c["layout"], dos=part(do))
    o, lse, dq, dk, dv = (fad.unshard(x, c["layout"]) for x in (outs, lses, dqs, dks, dvs))
    torch.cuda.synchronize()

    results = []
    allowed = allowed_mask("causal" if c["causal"] else "none", None, n, n, dev)
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    o64, lse64 = reference(q64, k64, v64, allowed, scale)
    ql, kl, vl = (t.clone().requires_grad_() for t in (q, k, v))
    ol, _ = reference(ql, kl, vl, allowed, scale)
    o64.backward(do.double())
    ol.backward(do)
    judge("o", o, ol, o64, results)
    with torch.no_grad():
        _, lse32 = reference(q.float(), k.float(), v.float(), allowed, scale)
    judge("lse", lse, lse32, lse64, results, slack=lse_slack(q, k, lse64, scale))
    shift_q, shift_k, slack_q, slack_k = delta_terms(q64, k64, v64, o, o64, do, allowed,
                                                     scale, lse64)
    # The ring adds up to W partial gradients that fa's backward kernel
    # returns in the inputs' dtype: each rounded by half an ulp of its size.
    half_ulp = 2.0 ** -9 if dt == torch.bfloat16 else 2.0 ** -12
    rounding = lambda ref: w * half_ulp * ref.abs().max().item()  # noqa: E731
    judge("dq", dq, ql.grad, q64.grad, results, ref_got=q64.grad + shift_q,
          slack=slack_q + rounding(q64.grad))
    judge("dk", dk, kl.grad, k64.grad, results, ref_got=k64.grad + shift_k,
          slack=slack_k + rounding(k64.grad))
    judge("dv", dv, vl.grad, v64.grad, results, slack=rounding(v64.grad))
    # The shards put back are the whole tensor.
    results.append({"what": "unshard(shard(q)) == q",
                    "ok": torch.equal(fad.unshard(part(q), c["layout"]), q)})
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    bundle = fa.load(args.bundle, args.lib, jit=False)
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    total = failed = 0
    worst = {}
    t0 = time.time()
    for c in cases(bundle):
        total += 1
        try:
            res = run_case(c, gen, dev)
        except Exception as e:  # a failed launch is a failed case
            res = [{"what": "exception", "ok": False, "message": str(e)}]
        for r in res:
            if "err" in r:
                tol = 2 * r["math_err"] + 1e-5 + r["slack"]
                worst[r["what"]] = max(worst.get(r["what"], 0), r["err"] / tol)
        if not all(r["ok"] for r in res):
            failed += 1
            print("FAIL %s: %s" % (c, [r for r in res if not r["ok"]]))
    if not total:
        print("FAIL: the bundle has no bf16/f16 d64/d128 forward and backward kernels")
        return 1
    print("ring schedule: %d/%d cases passed in %.1f s" % (total - failed, total,
                                                            time.time() - t0))
    print("worst err / tolerance per output: " +
          ", ".join("%s %.2f" % kv for kv in sorted(worst.items())))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
