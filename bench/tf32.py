#!/usr/bin/env python3
"""TFLOP/s of fa's float32 forward, TF32 (one TF32 MMA per product) and
f32-accurate (three, "3xTF32"), beside FlexAttention (torch.compile'd
flex_attention) with torch.backends.cuda.matmul.allow_tf32 True and False
and SDPA's EFFICIENT_ATTENTION backend on float32, in one process with
bench.py's interleaved CUDA-event timing: d in {64, 128}, N in {1k, 4k, 8k,
16k}, causal off and on, forward only, B*N tokens fixed (16k by default),
H = hidden / d. FLOPs as bench.py: 4*B*H*N^2*d, half when causal.

fa runs fa.forward_into with allow_tf32=True (column fa:tf32; an error
where the bundle has no TF32 kernel, rather than timing the accurate one)
and allow_tf32=False (fa:f32). FlexAttention's precision is fixed when it
compiles (inductor reads allow_tf32 then, and dynamo guards on it), so each
mode has a compiled function of its own, called with the flag set as it was
compiled; dynamo's recompile limits are raised past the shapes timed (beyond
them flex_attention silently runs unfused). SDPA's efficient backend ignores
the flag. Before timing, each fa output is compared with the efficient
backend's (max |difference|, printed; not a check).

--backward adds a training step's columns: forward + backward (O, then
dQ, dK, dV by torch.autograd.grad for a random dO) of fa.attention with
allow_tf32 True (fa:tf32+bwd; an error where the bundle lacks the TF32
forward or backward) and False (fa:f32+bwd), beside the compiled
FlexAttention's of the same modes (flex:tf32+bwd, flex:f32+bwd: TF32 and
"ieee" float32), FLOPs 3.5x the forward's (bench.py's backward is 2.5x), and
fa's dQ compared with the efficient backend's (printed, not a check).

    python3 bench/tf32.py --bundle out/bundle-f32 --lib build-rt/lib/libfa_runtime.so
        [--seqs 4096,16384] [--dims 128] [--tokens 16384] [--json out.json] [--backward]

The bundle: build/bin/fa-aot --config-file test/gpu/configs_f32.txt -o out/bundle-f32.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from fa._runtime import BWD, FWD  # noqa: E402
from bench import flops, time_interleaved, warm_up  # noqa: E402

COLUMNS = ["fa:tf32", "flex:tf32", "fa:f32", "flex:f32", "sdpa:efficient"]
STEP_COLUMNS = ["fa:tf32+bwd", "flex:tf32+bwd", "fa:f32+bwd", "flex:f32+bwd"]  # --backward


def flex_tf32(q, k, v, block_mask):
    from torch.nn.attention.flex_attention import flex_attention
    return flex_attention(q, k, v, block_mask=block_mask)


def flex_f32(q, k, v, block_mask):
    from torch.nn.attention.flex_attention import flex_attention
    return flex_attention(q, k, v, block_mask=block_mask)


def compiled_flex():
    """{True: flex compiled with TF32, False: without}. Two functions (dynamo
    caches per code object), each called with the flag set as it was
    compiled, so neither recompiles when the other runs; the limits are
    raised past the shapes timed."""
    for knob in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, max(getattr(torch._dynamo.config, knob), 256))
    flex = {}
    for tf, fn in ((True, flex_tf32), (False, flex_f32)):
        compiled = torch.compile(fn, dynamic=False)

        def run(q, k, v, block_mask, compiled=compiled, tf=tf):
            torch.backends.cuda.matmul.allow_tf32 = tf
            return compiled(q, k, v, block_mask)
        flex[tf] = run
    return flex


def fa_callable(bundle, q, k, v, causal, tf32):
    """fa.forward_into with allow_tf32=tf32 into preallocated O and LSE, and
    its output; an error dict where the bundle has no such kernel."""
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    try:
        mask = "causal" if causal else "none"
        kernel = bundle.find(FWD, "f32", q.shape[-1], v.shape[-1], mask, (-1, -1),
                             fa._capability(q), None, k.shape[-2], allow_tf32=tf32)
        if bundle._info(kernel)["tf32"] != tf32:
            return {"error": "no TF32 kernel for d%d %s in the bundle" % (q.shape[-1], mask)}, None
        fa.forward_into(q, k, v, o, lse, causal=causal, bundle=bundle, allow_tf32=tf32)
    except fa.FaError as e:
        return {"error": str(e).splitlines()[0][:200]}, None
    return (lambda: fa.forward_into(q, k, v, o, lse, causal=causal, bundle=bundle,
                                    allow_tf32=tf32)), o


def fa_step(bundle, q, k, v, do, causal, tf32):
    """A training step of fa.attention with allow_tf32=tf32: the forward
    with autograd, then torch.autograd.grad for dO (the backward kernels),
    and its dQ; an error dict where the bundle lacks a kernel of the mode."""
    mask = "causal" if causal else "none"
    try:
        for direction in (FWD, BWD):
            kernel = bundle.find(direction, "f32", q.shape[-1], v.shape[-1], mask, (-1, -1),
                                 fa._capability(q), None, k.shape[-2], allow_tf32=tf32)
            if bundle._info(kernel)["tf32"] != tf32:
                return {"error": "no %s %s kernel for d%d %s in the bundle"
                        % ("TF32" if tf32 else "f32-accurate",
                           "fwd" if direction == FWD else "bwd", q.shape[-1], mask)}, None
        qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))

        def step():
            o = fa.attention(qg, kg, vg, causal=causal, bundle=bundle, allow_tf32=tf32)
            return torch.autograd.grad(o, (qg, kg, vg), do)
        dq = step()[0]
    except fa.FaError as e:
        return {"error": str(e).splitlines()[0][:200]}, None
    return step, dq


def flex_step(flex, q, k, v, do, block_mask, tf32):
    """The compiled FlexAttention's training step in the mode tf32 (its
    function compiled with the flag so set, the flag set before each call
    and its backward)."""
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))

    def step():
        o = flex[tf32](qg, kg, vg, block_mask)
        return torch.autograd.grad(o, (qg, kg, vg), do)
    return step


def row(bundle, flex, b, h, n, d, causal, runs, budget_ms, backward=False):
    dev = "cuda"
    q, k, v = (torch.randn(b, h, n, d, device=dev) for _ in range(3))
    fns, outs = {}, {}

    def efficient():
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    if bundle is not None:
        for name, tf in (("fa:tf32", True), ("fa:f32", False)):
            fns[name], outs[name] = fa_callable(bundle, q, k, v, causal, tf)
    if flex is not None:
        from torch.nn.attention.flex_attention import create_block_mask
        mask = (create_block_mask(lambda b_, h_, i, j: j <= i, None, None, n, n, device=dev)
                if causal else None)
        for name, tf in (("flex:tf32", True), ("flex:f32", False)):
            fns[name] = lambda tf=tf: flex[tf](q, k, v, mask)
    fns["sdpa:efficient"] = efficient
    grads = {}
    if backward:
        do = torch.randn(b, h, n, d, device=dev)
        if bundle is not None:
            for name, tf in (("fa:tf32+bwd", True), ("fa:f32+bwd", False)):
                fns[name], grads[name] = fa_step(bundle, q, k, v, do, causal, tf)
        if flex is not None:
            for name, tf in (("flex:tf32+bwd", True), ("flex:f32+bwd", False)):
                fns[name] = flex_step(flex, q, k, v, do, mask, tf)
    diffs = {}
    try:
        ref = efficient()
        for name, o in outs.items():
            if o is not None:
                torch.cuda.synchronize()
                diffs[name] = (o - ref).abs().max().item()
        if any(g is not None for g in grads.values()):
            qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
            with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
            dq_ref = torch.autograd.grad(o, (qg,), do)[0]
            for name, g in grads.items():
                if g is not None:
                    diffs[name.replace("+bwd", " dq")] = (g - dq_ref).abs().max().item()
            del o, dq_ref, qg, kg, vg
    except RuntimeError as e:
        diffs["error"] = str(e).splitlines()[0][:120]
    live = [f for f in fns.values() if not isinstance(f, dict)]
    if live:
        warm_up(live[0])
    times = time_interleaved(fns, runs, budget_ms)
    f = flops(b, h, n, d, d, causal, "fwd")
    out = {}
    for name, t in times.items():
        # A training step: the forward's FLOPs and the backward's 2.5x.
        fl = f * 3.5 if name.endswith("+bwd") else f
        out[name] = ({"tflops": fl / (t["ms"] * 1e-3) / 1e12, "ms": t["ms"]}
                     if "ms" in t else t)
    return out, diffs


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", default=None,
                    help="fa bundle with f32 kernels (omit: the baselines only)")
    ap.add_argument("--lib", default=None, help="libfa_runtime.so")
    ap.add_argument("--seqs", default="1024,4096,8192,16384")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--tokens", type=int, default=16384, help="B*N")
    ap.add_argument("--hidden", type=int, default=2048, help="H*d")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--budget-ms", type=float, default=2000,
                    help="time cap per measurement (limits slow kernels' runs)")
    ap.add_argument("--no-flex", action="store_true", help="skip FlexAttention")
    ap.add_argument("--json", default=None)
    ap.add_argument("--backward", action="store_true",
                    help="also time training steps, forward + backward (columns *+bwd)")
    args = ap.parse_args()
    columns = COLUMNS + (STEP_COLUMNS if args.backward else [])
    bundle = fa.load(args.bundle, args.lib, jit=False) if args.bundle else None
    flex = None if args.no_flex else compiled_flex()
    old_flag = torch.backends.cuda.matmul.allow_tf32
    print("device: %s, torch %s" % (torch.cuda.get_device_name(), torch.__version__))
    print("%-4s %-6s %-6s " % ("d", "N", "causal") + " ".join("%15s" % c for c in columns) +
          "  tf32 fa/flex  f32 fa/flex" +
          ("  step tf32 fa/flex  step f32 fa/flex" if args.backward else ""))
    results, errors = [], {}
    for d in [int(x) for x in args.dims.split(",")]:
        h = max(1, args.hidden // d)
        for n in [int(x) for x in args.seqs.split(",")]:
            b = max(1, args.tokens // n)
            for causal in (False, True):
                r, diffs = row(bundle, flex, b, h, n, d, causal, args.runs, args.budget_ms,
                               args.backward)
                torch.backends.cuda.matmul.allow_tf32 = old_flag
                tflops = {c: r.get(c, {}).get("tflops") for c in columns}
                for c in columns:
                    if tflops[c] is None:
                        errors.setdefault(c, r.get(c, {}).get("error", "not run"))

                def ratio(a, b_):
                    return ("%6.2f" % (tflops[a] / tflops[b_])
                            if tflops[a] and tflops[b_] else "%6s" % "-")
                print("%-4d %-6d %-6s " % (d, n, causal) +
                      " ".join("%15.1f" % tflops[c] if tflops[c] else "%15s" % "-"
                               for c in columns) +
                      "  %12s %12s" % (ratio("fa:tf32", "flex:tf32"),
                                       ratio("fa:f32", "flex:f32")) +
                      ("  %17s %17s" % (ratio("fa:tf32+bwd", "flex:tf32+bwd"),
                                        ratio("fa:f32+bwd", "flex:f32+bwd"))
                       if args.backward else "") +
                      "".join("  |%s - efficient| %.1e" % (k, x) for k, x in diffs.items()
                              if k != "error"), flush=True)
                results.append({"d": d, "N": n, "B": b, "H": h, "causal": causal,
                                "diff_vs_efficient": diffs, **r})
    for c, e in errors.items():
        print("%s: %s" % (c, e))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
