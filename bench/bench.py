#!/usr/bin/env python3
"""TFLOP/s of fa next to PyTorch SDPA's flash and cuDNN backends, measured in
one process with CUDA events (median over interleaved rounds of back-to-back
calls, see time_interleaved), bf16, B*N tokens fixed
(64k by default), hidden 2048 (H = 2048/d), d in {64,128} (--dims: any, and
DvDV for a value head dim DV, e.g. 192v128), N in {512..16k}, causal on and
off, forward and backward.

FLOPs: 2*B*H*N^2*(D + Dv) forward, half of that when causal; backward 2.5x
forward.
Backward times cover only the backward (fa: bwd_pre + bwd + bwd_post; SDPA:
autograd.grad of a saved forward).

    python3 bench/bench.py --bundle out/bundle --lib <libfa_runtime.so> [--quick] [--json out.json]
        [--mma mma_sync|wgmma]   (fa's kernels; default: wgmma where the bundle has it)
        [--flex] [--seqs 2048,8192] [--dims 128]   (FlexAttention column; a subset of the grid)
        [--dims 96,192v128,256 --compare-mma]   (other head dims; fa's mma.sync kernels as
                                                 column fa:mma_sync beside the default)
        [--variant NAME=BUNDLE ...] [--directions fwd]   (A/B: other bundles in the same process)
        [--score-mod NAME [--mod-bundle BUNDLE]]   (fa with the score_mod NAME, beside fa
                                                    without it and FlexAttention with it)

--score-mod NAME times, in the same rounds as the rest, fa's kernels built with
that score_mod (fa-aot --score-mods; from --mod-bundle, default --bundle) as
column fa:NAME, and FlexAttention with the same score_mod (the reference of
test/gpu/score_mods.py, the one the GPU tests check fa against) as flex:NAME;
FLOPs are counted as without the score_mod.
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "gpu"))
import fa  # noqa: E402
import score_mods  # noqa: E402

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def warm_up(run, min_ms=30.0):
    """Calls `run` (which enqueues GPU work) until min_ms of GPU time have
    passed. The first shape timed after host-side work (inputs, the
    correctness check) ran up to 10-15% slow at 100+ µs calls in a few ms of
    samples, so a same-process A/B depended on its order (PERF.md, 2026-12-03
    and 2026-12-04): the clocks ramp back up under load."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    spent = 0.0
    while spent < min_ms:
        start.record()
        run()
        end.record()
        end.synchronize()
        spent += start.elapsed_time(end)


def graph_us(fn, reps=20, rounds=5):
    """Median GPU time (µs) of one call, from replays of a CUDA graph of
    `reps` calls: the host's time per call (Python, ctypes) is left out, as
    it is in a serving engine's captured decode step."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    warm_up(graph.replay)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(rounds):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / reps)
    return sorted(times)[len(times) // 2]


def time_interleaved(fns, runs, budget_ms):
    """GPU milliseconds per call of each callable in `fns` (name -> fn or an
    error dict), median over rounds that visit every callable in turn, so
    clock and temperature drift fall on all of them alike. A sample is a batch
    of back-to-back calls between two events (the host enqueues ahead, so its
    launch overhead is hidden as it is in a training step); fewer rounds when
    one call is slow, so a slow backend cannot stall the table."""
    out, live, reps = {}, {}, {}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for name, fn in fns.items():
        if isinstance(fn, dict):
            out[name] = fn
            continue
        try:
            fn()  # warm-up: compilation, autotuning, caches
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            end.synchronize()
        except Exception as e:  # backend unavailable for this shape  # noqa: BLE001
            out[name] = {"error": str(e).splitlines()[0][:200]}
            continue
        first = max(start.elapsed_time(end), 1e-3)
        live[name] = fn
        reps[name] = max(1, min(50, int(5.0 / first)))  # ≥ ~5 ms per sample
    if not live:
        return out

    def sample(name):
        start.record()
        for _ in range(reps[name]):
            live[name]()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    # A warm-up round at full clocks, which also sets the number of rounds.
    round_ms = sum(sample(name) for name in live)
    rounds = max(3, min(runs, int(budget_ms * len(live) / max(round_ms, 1e-3))))
    times = {n: [] for n in live}
    for _ in range(rounds):
        for name in live:
            times[name].append(sample(name) / reps[name])
    for name in live:
        out[name] = {"ms": statistics.median(times[name]), "runs": len(times[name]),
                     "reps": reps[name]}
    return out


def fa_callable(bundle, q, k, v, do, causal, direction, args, deterministic=False,
                score_mod=None, mma=None, mod_args=()):
    """fa's forward or backward from `bundle` into preallocated outputs
    (`deterministic`: the bundle's deterministic backward; `score_mod`: the
    kernels built with that score_mod, reading the tensors `mod_args`); an
    error dict when the bundle has no kernel for it."""
    kw = dict(causal=causal, mma=mma or args.mma, bundle=bundle, score_mod=score_mod)
    if mod_args:
        kw["mod_args"] = list(mod_args)
    try:
        o = torch.empty_like(do)
        lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
        fa.forward_into(q, k, v, o, lse, **kw)
        if direction == "fwd":
            return lambda: fa.forward_into(q, k, v, o, lse, **kw)
        dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
        delta = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
        acc = torch.empty(q.shape, device=q.device, dtype=torch.float32)
        return lambda: fa.backward_into(q, k, v, o, do, lse, dq, dk, dv, delta, acc,
                                        deterministic=deterministic, **kw)
    except fa.FaError as e:
        return {"error": str(e).splitlines()[0][:200]}


def sdpa_callable(fwd_fn, backend, q, k, v, do, direction):
    """fwd_fn(q, k, v) (an SDPA backend or FlexAttention), or the autograd
    backward of one saved forward."""
    def ctx():
        return sdpa_kernel(backend) if backend is not None else contextlib.nullcontext()
    try:
        if direction == "fwd":
            def run():
                with ctx():
                    return fwd_fn(q, k, v)
            return run
        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
        with ctx():
            og = fwd_fn(qg, kg, vg)

        def run_bwd():
            with ctx():
                return torch.autograd.grad(og, (qg, kg, vg), do, retain_graph=True)
        return run_bwd
    except Exception as e:  # noqa: BLE001 (backend or compile failure)
        return {"error": str(e).splitlines()[0][:200]}


def flops(b, h, n, d, dv, causal, direction):
    f = 2.0 * b * h * n * n * (d + dv)
    if causal:
        f /= 2
    return f * (2.5 if direction == "bwd" else 1.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", default=None, help="fa bundle (omit to time SDPA only)")
    ap.add_argument("--lib", default=None, help="libfa_runtime.so")
    ap.add_argument("--quick", action="store_true", help="N in {1k, 4k} only, fewer runs")
    ap.add_argument("--tokens", type=int, default=65536, help="B*N")
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--budget-ms", type=float, default=3000,
                    help="time cap per measurement (limits slow kernels' runs)")
    ap.add_argument("--fa-directions", default="fwd,bwd",
                    help="directions to time for fa (the SDPA baselines always run both)")
    ap.add_argument("--mma", choices=["any", "mma_sync", "wgmma"], default="any",
                    help="instructions of fa's forward and backward kernels (any: the "
                         "runtime's choice)")
    ap.add_argument("--seqs", default=None,
                    help="comma-separated N values (default: 512..16k, or 1k,4k with --quick)")
    ap.add_argument("--dims", default="64,128",
                    help="comma-separated head dims; DvDV for a value head dim DV (192v128)")
    ap.add_argument("--compare-mma", action="store_true",
                    help="also time fa's mma.sync kernels (column fa:mma_sync)")
    ap.add_argument("--masks", default="none,causal", help="comma-separated: none, causal")
    ap.add_argument("--flex", action="store_true",
                    help="also time FlexAttention (torch.compile'd flex_attention)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=BUNDLE[@LIB]",
                    help="also time fa from another bundle (same process), e.g. a compiler "
                         "variant, through another libfa_runtime.so when @LIB is given (a "
                         "bundle of another ABI version); printed under the row with its "
                         "ratio to fa and cuDNN")
    ap.add_argument("--directions", default="fwd,bwd",
                    help="directions to time at all (baselines included)")
    ap.add_argument("--deterministic", action="store_true",
                    help="also time the bundle's deterministic backward (column fa:det)")
    ap.add_argument("--score-mod", default=None, metavar="NAME",
                    help="also time fa with the score_mod NAME (column fa:NAME) and "
                         "FlexAttention with the same score_mod (flex:NAME): %s" %
                         ", ".join(sorted(score_mods.SCORE_MODS)))
    ap.add_argument("--mod-bundle", default=None,
                    help="the bundle of the --score-mod kernels (default: --bundle)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    mod_fn = None
    if args.score_mod:
        try:
            mod_fn = score_mods.get(args.score_mod)
        except KeyError as e:
            ap.error(str(e))

    dev = torch.device("cuda")
    bundle = fa.load(args.bundle, args.lib) if args.bundle else None
    variants = {}
    for spec in args.variant:
        name, _, path = spec.partition("=")
        path, _, lib = path.partition("@")
        if not path:
            ap.error("--variant expects NAME=BUNDLE[@LIB], got %r" % spec)
        variants[name] = fa.Bundle(path, lib or args.lib)
    dims = []
    for x in args.dims.split(","):
        d_, _, dv_ = x.partition("v")
        dims.append((int(d_), int(dv_ or d_)))
    seqs = ([int(x) for x in args.seqs.split(",")] if args.seqs else
            [1024, 4096] if args.quick else [512, 1024, 2048, 4096, 8192, 16384])
    mod_bundle = (fa.Bundle(args.mod_bundle, args.lib) if args.mod_bundle else bundle)
    flex = None
    if args.flex or mod_fn is not None:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        # One compiled kernel per shape and grad mode: past dynamo's default
        # limit of 8 it would silently fall back to the unfused (score-
        # materialising) implementation and time that instead.
        for knob in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, 1024)
        flex = torch.compile(flex_attention, dynamic=False)
    masks = args.masks.split(",")
    if not masks or set(masks) - {"none", "causal"}:
        ap.error("--masks takes none and/or causal, got %r" % args.masks)
    runs = 10 if args.quick else args.runs
    rows = []
    print("device: %s, torch %s" % (torch.cuda.get_device_name(), torch.__version__))
    for d, dv in dims:
        h = args.hidden // d
        for n in seqs:
            b = max(1, args.tokens // n)
            q, k, v, do = (torch.randn(b, h, n, x, device=dev, dtype=torch.bfloat16)
                           for x in (d, d, dv, dv))
            # The tensors the score_mod reads (ALiBi slopes, a bias): fa gets
            # them as mod_args, FlexAttention's score_mod captures them.
            mod_args = (score_mods.make_mod_args(args.score_mod, b, h, h, n, n, dev)
                        if mod_fn is not None else ())
            flex_mod = (score_mods.flex_score_mod(args.score_mod, mod_args)
                        if mod_fn is not None else None)
            for causal in [m == "causal" for m in masks]:
                for direction in [x for x in ("fwd", "bwd") if x in args.directions.split(",")]:
                    row = {"d": d, "dv": dv, "n": n, "b": b, "h": h, "causal": causal,
                           "direction": direction}
                    f = flops(b, h, n, d, dv, causal, direction)
                    fns = {}
                    for name, backend in BACKENDS.items():
                        fns[name] = sdpa_callable(
                            lambda q_, k_, v_: F.scaled_dot_product_attention(
                                q_, k_, v_, is_causal=causal),
                            backend, q, k, v, do, direction)
                    if flex is not None:
                        mask = (create_block_mask(lambda b_, h_, i, j: j <= i, None, None,
                                                  n, n, device=dev) if causal else None)
                        if args.flex:
                            fns["flex"] = sdpa_callable(
                                lambda q_, k_, v_: flex(q_, k_, v_, block_mask=mask),
                                None, q, k, v, do, direction)
                        if mod_fn is not None:
                            fns["flex:" + args.score_mod] = sdpa_callable(
                                lambda q_, k_, v_: flex(q_, k_, v_, score_mod=flex_mod,
                                                        block_mask=mask),
                                None, q, k, v, do, direction)
                    if bundle is not None and direction in args.fa_directions.split(","):
                        for key, bnd in [("fa", bundle)] + [("fa:" + k_, b_) for k_, b_
                                                            in variants.items()]:
                            fns[key] = fa_callable(bnd, q, k, v, do, causal, direction, args)
                        if args.compare_mma:
                            fns["fa:mma_sync"] = fa_callable(bundle, q, k, v, do, causal,
                                                             direction, args, mma="mma_sync")
                        if args.deterministic and direction == "bwd":
                            fns["fa:det"] = fa_callable(bundle, q, k, v, do, causal,
                                                        direction, args, deterministic=True)
                        if mod_fn is not None:
                            fns["fa:" + args.score_mod] = fa_callable(
                                mod_bundle, q, k, v, do, causal, direction, args,
                                score_mod=args.score_mod, mod_args=mod_args)
                            # The same score_mod from each A/B variant bundle.
                            for k_, b_ in variants.items():
                                fns["fa:%s@%s" % (args.score_mod, k_)] = fa_callable(
                                    b_, q, k, v, do, causal, direction, args,
                                    score_mod=args.score_mod, mod_args=mod_args)
                    for name, res in time_interleaved(fns, runs, args.budget_ms).items():
                        if "ms" in res:
                            res["tflops"] = f / res["ms"] / 1e9
                        row[name] = res
                    rows.append(row)
                    print_row(row)
            del q, k, v, do, mod_args
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as fjson:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "date": time.strftime("%Y-%m-%d %H:%M:%S"), "tokens": args.tokens,
                       "hidden": args.hidden, "bundle": args.bundle, "mma": args.mma,
                       "score_mod": args.score_mod, "mod_bundle": args.mod_bundle,
                       "rows": rows},
                      fjson, indent=1)
    return 0


_header_done = False


def print_row(row):
    global _header_done
    if not _header_done:
        print("%7s %6s %3s %3s %-6s %-4s | %8s %8s %8s %8s | %9s %9s %9s" %
              ("d", "N", "B", "H", "causal", "dir", "fa", "flash", "flex", "cudnn", "fa/flash",
               "fa/flex", "fa/cudnn"))
        _header_done = True

    def tf(name):
        r = row.get(name)
        return r["tflops"] if r and "tflops" in r else None

    def fmt(x):
        return "%8.1f" % x if x is not None else "%8s" % "n/a"

    fa_, fl, fx, cu = tf("fa"), tf("flash"), tf("flex"), tf("cudnn")
    ratio = lambda a, b: "%9.2f" % (a / b) if a and b else "%9s" % "-"  # noqa: E731
    dims = "%d" % row["d"] + ("v%d" % row["dv"] if row.get("dv", row["d"]) != row["d"] else "")
    print("%7s %6d %3d %3d %-6s %-4s | %s %s %s %s | %s %s %s" %
          (dims, row["n"], row["b"], row["h"], "yes" if row["causal"] else "no",
           row["direction"], fmt(fa_), fmt(fl), fmt(fx), fmt(cu), ratio(fa_, fl),
           ratio(fa_, fx), ratio(fa_, cu)),
          flush=True)
    for key in sorted(k_ for k_ in row if k_.startswith("fa:")):
        x = tf(key)
        print("%32s %-14s %s | %s of fa, %s of cudnn" % ("", key, fmt(x), ratio(x, fa_).strip(),
                                                         ratio(x, cu).strip()), flush=True)
        if "flex:" + key[3:] in row:  # the same score_mod in FlexAttention
            y = tf("flex:" + key[3:])
            print("%32s %-14s %s | %s: %s of it; it: %s of flex" % (
                "", "flex:" + key[3:], fmt(y), key, ratio(x, y).strip(),
                ratio(y, fx).strip()), flush=True)
        r = row.get(key) or {}
        if "error" in r:
            print("%32s %-14s error: %s" % ("", key, r["error"]), flush=True)


if __name__ == "__main__":
    sys.exit(main())
