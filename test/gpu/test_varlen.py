#!/usr/bin/env python3
"""Differential GPU test of the varlen wgmma forwards and wgmma and mma.sync backwards
(H200 only, never CI), through the runtime and fa.varlen.forward_into /
backward_into / fa.attention_varlen (autograd).

Random cases over the bundle's varlen kernels (every dtype, head dim and
mask it has): 1-8 sequences of 0..2048 queries and keys each (0 and 1
included, lengths of queries and keys equal or independent), GQA/MQA, some
with tokens past the last sequence, some reading q, k, v out of a packed
qkv [T, 3, H, D] (strided views), whole batches without queries (a no-op)
or without keys (o = 0, lse = -inf). Kernels with attention sinks
(configs_varlen_sinks.txt) take random sinks per head (N(0, 2), dominant +8,
-inf), their reference has the sink as one more logit without a value (a
sequence without keys: o = 0, lse = sinks[h]), and d_sinks, summed over
every sequence's rows, is judged against the sum of the sequences' float64
autograd d_sinks. Each sequence is compared with a
float64 reference of its own (masks from its own start with its own
lengths) under the flash-attn rule of test_attention.py: max|fa - ref64| <=
2 * max|same math in the inputs' dtype - ref64| + 1e-5 (LSE against float32
math plus lse_slack). Where the bundle has the kernel's backward, the case
also runs it (dq, dk, dv per sequence against float64 autograd, dq and dk
shifted by what the stored O changes in Delta, as test_attention.py
judges them; some cases through fa.attention_varlen's autograd). Outputs are
NaN-poisoned first, so a row a kernel fails to write shows; rows outside
every sequence must stay poisoned (dq: zero). Bad offsets must raise FaError
before any launch.

Built on the development machine (MLIR is not on the GPU machine):
    build/bin/fa-aot --config-file test/gpu/configs_varlen.txt -o out/bundle-varlen
    (with sinks: --config-file test/gpu/configs_varlen_sinks.txt)
Then, on the GPU machine:
    python3 test/gpu/test_varlen.py --bundle out/bundle-varlen --lib <libfa_runtime.so>
"""
import argparse
import json
import math
import os
import random
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from fa import varlen  # noqa: E402
from test_attention import (DTYPES, allowed_mask, delta_terms, judge, lse_slack,  # noqa: E402
                            poisoned, reference)
import test_sinks  # noqa: E402


def random_lengths(rng, batch, longest):
    """Sequence lengths with 0, 1 and ragged ones well represented."""
    pick = lambda: rng.choice([0, 1, rng.randint(2, 130),  # noqa: E731
                               rng.randint(1, longest), rng.randint(1, longest)])
    return [pick() for _ in range(batch)]


def backward_of(bundle, kernel):
    """The bundle's varlen backward for a varlen forward's problem, or None."""
    for k in bundle.kernels():
        if k["varlen"] and k["direction"] == "bwd" and all(
                k[f] == kernel[f] for f in ("dtype", "head_dim", "head_dim_v", "mask",
                                            "window_left", "window_right", "sinks")):
            return k
    return None


def random_case(rng, kernel, index, max_len=2048, has_bwd=False):
    h = rng.choice([1, 2, 4, 8, 16])
    hkv = rng.choice([x for x in (1, 2, 4, 8, 16) if h % x == 0])
    batch = rng.randint(1, 8)
    longest = min(max_len, rng.choice([256, 1024, 2048]))
    lq = random_lengths(rng, batch, longest)
    lk = lq if rng.random() < 0.5 else random_lengths(rng, batch, longest)
    kind = index % 10
    if kind == 8:
        lq = [0] * batch  # no query at all: nothing is launched
    if kind == 9:
        lk = [0] * batch  # no key at all: o = 0, lse = -inf
    return {"tag": kernel["tag"], "dtype": kernel["dtype"], "d": kernel["head_dim"],
            "dv": kernel["head_dim_v"], "mask": kernel["mask"],
            "window": (kernel["window_left"], kernel["window_right"]),
            "h": h, "hkv": hkv, "lq": lq, "lk": lk,
            "pad_q": rng.choice([0, 0, 0, 5]), "pad_k": rng.choice([0, 0, 0, 3]),
            "qkv_packed": kind in (3, 6) and h == hkv and lq == lk and kernel["head_dim"] ==
            kernel["head_dim_v"],
            "scale": rng.choice([None, 0.3]),
            "sinks": [x for x in test_sinks.random_sinks(rng, h, "cpu").tolist()]
            if kernel["sinks"] else None,
            "bwd": has_bwd and kind != 8, "autograd": has_bwd and kind in (4, 7)}


def mask_arguments(case):
    """fa.varlen's arguments for the kernel's mask (flash-attn's meanings)."""
    if case["mask"] == "causal":
        return {"causal_top_left": True}
    if case["mask"] == "causal_bottom_right":
        return {"causal": True}
    if case["mask"] == "window":
        return {"window_size": case["window"]}
    return {}


def offsets(lengths, dev):
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    return torch.tensor(cu, dtype=torch.int32, device=dev), cu


def inputs(case, gen, dev):
    dt = DTYPES[case["dtype"]]
    tq = sum(case["lq"]) + case["pad_q"]
    tk = sum(case["lk"]) + case["pad_k"]
    h, hkv, d, dv = case["h"], case["hkv"], case["d"], case["dv"]
    if case["qkv_packed"]:
        qkv = torch.randn(tq, 3, h, d, generator=gen, device=dev).to(dt)
        return qkv[:, 0], qkv[:, 1], qkv[:, 2]
    q = torch.randn(tq, h, d, generator=gen, device=dev).to(dt)
    k = torch.randn(tk, hkv, d, generator=gen, device=dev).to(dt)
    v = torch.randn(tk, hkv, dv, generator=gen, device=dev).to(dt)
    return q, k, v


def sink_reference(sinks):
    """test_attention.reference, or with `sinks` test_sinks.reference."""
    if sinks is None:
        return reference
    return lambda q, k, v, allowed, scale: test_sinks.reference(q, k, v, sinks, allowed, scale)


def check_sequence(case, q, k, v, o, lse, scale, results, b, rows, keys, grads=None,
                   sinks=None):
    """Sequence b's rows of o and lse (and, with `grads` = (do, dq, dk, dv),
    of the gradients) against its own references; with `sinks`, their
    d_sinks terms are added to sinks["terms"]."""
    (q0, q1), (k0, k1) = rows, keys
    got_o, got_lse = o[q0:q1], lse[:, q0:q1]
    if grads is not None and q1 == q0 and k1 > k0:
        # Keys without queries get no gradient.
        _, _, dk, dv = grads
        ok = bool((dk[k0:k1] == 0).all()) and bool((dv[k0:k1] == 0).all())
        results.append({"what": "seq%d dk=dv=0 (no queries)" % b, "ok": ok})
    if q1 == q0:
        return
    if k1 == k0:
        # No key: O = 0 and LSE = -inf exactly, or the head's sink (to the
        # f32 rounding of the kernel's log2-unit finalisation, ln2·(sink·log2e)).
        if sinks is None:
            lse_ok = bool(torch.isneginf(got_lse).all())
        else:
            want = sinks["t"].view(-1, 1).expand_as(got_lse)
            lse_ok = bool(torch.isclose(got_lse, want, rtol=2.0 ** -21, atol=0.0).all())
        ok = bool((got_o == 0).all()) and lse_ok
        if grads is not None:
            ok = ok and bool((grads[1][q0:q1] == 0).all())
        results.append({"what": "seq%d o=0, lse=%s%s (no keys)"
                        % (b, "-inf" if sinks is None else "sinks",
                           ", dq=0" if grads is not None else ""), "ok": ok})
        return
    as_dense = lambda t: t.transpose(0, 1).unsqueeze(0)  # noqa: E731 [1,H,L,D]
    qs, ks, vs = as_dense(q[q0:q1]), as_dense(k[k0:k1]), as_dense(v[k0:k1])
    allowed = allowed_mask(case["mask"], case["window"], q1 - q0, k1 - k0, q.device)
    ref = sink_reference(None if sinks is None else sinks["t"])
    with torch.no_grad():
        o64, lse64 = ref(qs.double(), ks.double(), vs.double(), allowed, scale)
        ol, _ = ref(qs, ks, vs, allowed, scale)
        _, lse32 = ref(qs.float(), ks.float(), vs.float(), allowed, scale)
    judge("seq%d o" % b, as_dense(got_o), ol, o64, results)
    judge("seq%d lse" % b, got_lse.unsqueeze(0), lse32, lse64, results,
          slack=lse_slack(qs, ks, lse64, scale))
    if grads is not None:
        check_gradients(b, qs, ks, vs, as_dense(got_o), allowed, scale,
                        [as_dense(t) for t in (grads[0][q0:q1], grads[1][q0:q1],
                                               grads[2][k0:k1], grads[3][k0:k1])],
                        results, sinks)


def check_gradients(b, qs, ks, vs, o, allowed, scale, grads, results, sinks=None):
    """Sequence b's dq, dk, dv ([1,H,L,D] views) against float64 autograd;
    with `sinks`, its d_sinks terms (float64, in the inputs' dtype, the
    stored O's shift and slack) are added to sinks["terms"]."""
    do, dq, dk, dv = grads
    q64, k64, v64 = (t.double().requires_grad_() for t in (qs, ks, vs))
    ql, kl, vl = (t.clone().requires_grad_() for t in (qs, ks, vs))
    if sinks is None:
        o64, lse64 = reference(q64, k64, v64, allowed, scale)
        ol, _ = reference(ql, kl, vl, allowed, scale)
    else:
        s64 = sinks["t"].double().requires_grad_()
        sl = sinks["t"].clone().requires_grad_()
        o64, lse64 = test_sinks.reference(q64, k64, v64, s64, allowed, scale)
        ol, _ = test_sinks.reference(ql, kl, vl, sl, allowed, scale)
    o64.backward(do.double())
    ol.backward(do)
    if sinks is not None:
        shift, slack = test_sinks.sink_terms(o, o64, do, lse64, sinks["t"])
        for key, term in (("ref", s64.grad), ("low", sl.grad.double()), ("shift", shift)):
            sinks["terms"][key] = sinks["terms"].get(key, 0) + term
        sinks["terms"]["slack"] = sinks["terms"].get("slack", 0) + slack
    shift_q, shift_k, slack_q, slack_k = delta_terms(q64, k64, v64, o, o64, do, allowed,
                                                     scale, lse64)
    judge("seq%d dq" % b, dq, ql.grad, q64.grad, results, ref_got=q64.grad + shift_q,
          slack=slack_q)
    judge("seq%d dk" % b, dk, kl.grad, k64.grad, results, ref_got=k64.grad + shift_k,
          slack=slack_k)
    judge("seq%d dv" % b, dv, vl.grad, v64.grad, results)


def run_case(case, bundle, gen, dev):
    q, k, v = inputs(case, gen, dev)
    cu_q, host_q = offsets(case["lq"], dev)
    cu_k, host_k = offsets(case["lk"], dev)
    if case["qkv_packed"]:
        cu_k, host_k = cu_q, host_q
    tq, h, dv = q.shape[0], case["h"], case["dv"]
    o = poisoned(tq, h, dv, dtype=q.dtype, device=dev)
    lse = poisoned(h, tq, dtype=torch.float32, device=dev)
    scale = case["scale"] if case["scale"] is not None else 1.0 / math.sqrt(case["d"])
    max_q, max_k = max(case["lq"]), max(case["lk"])
    kw = dict(softmax_scale=case["scale"], bundle=bundle, **mask_arguments(case))
    sinks = None if case["sinks"] is None else \
        {"t": torch.tensor(case["sinks"], dtype=torch.float32, device=dev), "terms": {}}
    grads, dsinks = None, None
    if case.get("autograd"):
        qa, ka, va = (t.detach().clone().requires_grad_() for t in (q, k, v))
        sa = None if sinks is None else sinks["t"].clone().requires_grad_()
        oa, lsea = fa.attention_varlen(qa, ka, va, cu_q, cu_k, max_q, max_k,
                                       return_lse=True, sinks=sa, **kw)
        do = torch.randn(oa.shape, generator=gen, device=dev).to(q.dtype)
        oa.backward(do)
        o.copy_(oa.detach())
        lse.copy_(lsea)
        grads = (do, qa.grad, ka.grad, va.grad)
        dsinks = None if sa is None else sa.grad
    else:
        varlen.forward_into(q, k, v, o, lse, cu_q, cu_k, max_q, max_k,
                            sinks=None if sinks is None else sinks["t"], **kw)
        if case.get("bwd"):
            do = torch.randn(o.shape, generator=gen, device=dev).to(q.dtype)
            dq = poisoned(*q.shape, dtype=q.dtype, device=dev)
            dk = torch.zeros_like(k)  # rows outside every sequence stay as they are
            dv = torch.zeros_like(v)
            dsinks = varlen.backward_into(q, k, v, o, do, lse, dq, dk, dv, cu_q, cu_k, max_k,
                                          equal_lengths=cu_q is cu_k,
                                          sinks=None if sinks is None else sinks["t"], **kw)
            grads = (do, dq, dk, dv)
    torch.cuda.synchronize()
    results = []
    batch = len(case["lq"])
    for b in range(batch):
        check_sequence(case, q, k, v, o, lse, scale, results, b,
                       (host_q[b], host_q[b + 1]), (host_k[b], host_k[b + 1]), grads, sinks)
    if sinks is not None and grads is not None:
        check_sink_gradient(sinks, dsinks, results)
    if grads is not None and host_q[batch] < tq:
        results.append({"what": "dq rows past the last sequence are 0",
                        "ok": bool((grads[1][host_q[batch]:] == 0).all())})
    # Rows past the last sequence belong to none and stay as they were
    # (unless there is no key: then o and lse are filled whole).
    end = host_q[batch]
    if end < tq and sum(case["lk"]) + case["pad_k"] > 0 and max(case["lq"]) > 0 and \
            not case.get("autograd"):  # (autograd's o is a fresh tensor)
        untouched = bool(torch.isnan(o[end:]).all()) and bool(torch.isnan(lse[:, end:]).all())
        results.append({"what": "rows past the last sequence untouched", "ok": untouched})
    return results


def check_sink_gradient(sinks, dsinks, results):
    """d_sinks, summed over every sequence's rows, against the sum of the
    sequences' float64 autograd d_sinks (0 where no sequence has both
    queries and keys; a -inf sink has none)."""
    t = sinks["terms"]
    zero = torch.zeros(sinks["t"].shape, dtype=torch.float64, device=sinks["t"].device)
    live = torch.isfinite(sinks["t"])
    ref = torch.where(live, zero + t.get("ref", 0), zero)
    low = torch.where(live, zero + t.get("low", 0), zero)
    judge("d_sinks", dsinks, low, ref, results, ref_got=ref + t.get("shift", 0),
          slack=t.get("slack", 0.0))


def check_api(bundle, dev):
    """fa.attention_varlen end to end once per dtype, and what it refuses."""
    out = []
    kernels = [k for k in bundle.kernels() if k["varlen"] and k["direction"] == "fwd"]
    for kern in kernels[:1]:
        dt = DTYPES[kern["dtype"]]
        d = kern["head_dim"]
        cu = torch.tensor([0, 100, 400], dtype=torch.int32, device=dev)
        q = torch.randn(400, 4, d, device=dev).to(dt)
        kw = mask_arguments({"mask": kern["mask"],
                             "window": (kern["window_left"], kern["window_right"])})
        if kern["sinks"]:
            kw["sinks"] = torch.randn(4, device=dev)
        o, lse = fa.attention_varlen(q, q, q, cu, cu, 300, 300, return_lse=True,
                                     bundle=bundle, **kw)
        out.append({"what": "attention_varlen shapes", "ok": tuple(o.shape) == (400, 4, d) and
                    tuple(lse.shape) == (4, 400)})
        for bad, expect in (((cu, cu, 299, 300), "more than max_seqlen_q = 299"),
                            ((torch.tensor([0, 100, 90], dtype=torch.int32, device=dev), cu,
                              300, 300), "offsets must not decrease")):
            try:
                fa.attention_varlen(q, q, q, *bad, bundle=bundle, **kw)
                ok = False
            except fa.FaError as e:
                ok = expect in str(e)
            out.append({"what": "refuses: " + expect, "ok": ok})
        if kern["sinks"]:
            for bad, expect in ((torch.zeros(3, device=dev), "sinks.shape is [3], expected [4]"),
                                (torch.zeros(4, device=dev, dtype=torch.float16),
                                 "sinks.dtype is torch.float16")):
                try:
                    fa.attention_varlen(q, q, q, cu, cu, 300, 300, bundle=bundle,
                                        **dict(kw, sinks=bad))
                    ok = False
                except fa.FaError as e:
                    ok = expect in str(e)
                out.append({"what": "refuses: " + expect, "ok": ok})
        if backward_of(bundle, kern) is not None:
            qg = q.clone().requires_grad_()
            if kern["sinks"]:
                kw["sinks"] = kw["sinks"].clone().requires_grad_()
            og = fa.attention_varlen(qg, qg, qg, cu, cu, 300, 300, bundle=bundle, **kw)
            og.sum().backward()
            sink_grad = not kern["sinks"] or (kw["sinks"].grad is not None and bool(
                torch.isfinite(kw["sinks"].grad).all()))
            out.append({"what": "attention_varlen is differentiable",
                        "ok": og.grad_fn is not None and qg.grad is not None and
                        tuple(qg.grad.shape) == tuple(q.shape) and
                        bool(torch.isfinite(qg.grad).all()) and sink_grad})
    return out


def check_graph(bundle, dev):
    """A varlen launch captured into a CUDA graph (the offsets' host check is
    skipped under capture), replayed with new data in the same buffers: the
    replay equals an eager launch on that data."""
    kern = [k for k in bundle.kernels() if k["varlen"] and k["direction"] == "fwd"][0]
    dt, d = DTYPES[kern["dtype"]], kern["head_dim"]
    kw = mask_arguments({"mask": kern["mask"],
                         "window": (kern["window_left"], kern["window_right"])})
    if kern["sinks"]:
        kw["sinks"] = torch.randn(4, device=dev)
    cu = torch.tensor([0, 130, 131, 700], dtype=torch.int32, device=dev)
    q, k, v = (torch.randn(700, 4, d, device=dev).to(dt) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(4, 700, device=dev)
    run = lambda: varlen.forward_into(q, k, v, o, lse, cu, cu, 569, 569,  # noqa: E731
                                      bundle=bundle, **kw)
    run()  # loads the module before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    for t in (q, k, v):
        t.copy_(torch.randn_like(t, dtype=torch.float32).to(dt))
    graph.replay()
    torch.cuda.synchronize()
    replayed, replayed_lse = o.clone(), lse.clone()
    run()
    torch.cuda.synchronize()
    ok = torch.equal(replayed, o) and torch.equal(replayed_lse, lse)
    return [{"what": "CUDA graph replay with new data equals eager", "ok": ok}]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bundle", default=os.environ.get("FA_VARLEN_BUNDLE", "out/bundle-varlen"))
    p.add_argument("--lib", default=None)
    p.add_argument("--cases", type=int, default=120)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-len", type=int, default=2048,
                   help="longest sequence (smaller under compute-sanitizer)")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    dev = torch.device("cuda")
    bundle = fa.Bundle(a.bundle, lib_path=a.lib, jit=False)
    kernels = [k for k in bundle.kernels() if k["varlen"] and k["direction"] == "fwd"]
    if not kernels:
        sys.exit("no varlen kernels in %s" % a.bundle)
    rng = random.Random(a.seed)
    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)
    failures, report = 0, []
    start = time.time()
    api = check_api(bundle, dev) + check_graph(bundle, dev)
    for r in api:
        print("%s api: %s" % ("ok  " if r["ok"] else "FAIL", r["what"]))
        failures += not r["ok"]
    for i in range(a.cases):
        kern = kernels[i % len(kernels)]
        case = random_case(rng, kern, i, a.max_len, backward_of(bundle, kern) is not None)
        try:
            results = run_case(case, bundle, gen, dev)
        except Exception as e:  # a launch failure is a failed case, named
            results = [{"what": "raised %s: %s" % (type(e).__name__, e), "ok": False}]
        ok = all(r["ok"] for r in results)
        failures += not ok
        report.append({"case": case, "ok": ok, "results": results})
        label = "%s h%d/%d lq=%s lk=%s%s%s" % (
            case["tag"], case["h"], case["hkv"], case["lq"], case["lk"],
            " qkv" if case["qkv_packed"] else "",
            " +autograd" if case.get("autograd") else " +bwd" if case.get("bwd") else "")
        if not ok:
            bad = [r for r in results if not r["ok"]][:3]
            print("FAIL %s: %s" % (label, bad))
        else:
            print("ok   %s" % label)
    print("varlen: %d/%d cases passed (%d kernels, %.0f s)%s"
          % (a.cases - sum(not r["ok"] for r in report), a.cases, len(kernels),
             time.time() - start, "" if failures == 0 else "; %d FAILED" % failures))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"api": api, "cases": report}, f, default=str)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
