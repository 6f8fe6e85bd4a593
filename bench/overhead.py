#!/usr/bin/env python3
"""Where the time of a tiny attention call goes: fa next to PyTorch SDPA, one process.

For each tiny shape (bf16, B1 H8 N128, d 64 and 128, no mask and causal) it prints:

1. host µs per call: `--calls` back-to-back calls, one synchronize at the end,
   median of `--rounds` interleaved rounds, of
     fwd      o = attention(q, k, v) under no_grad
     fwd+bwd  attention(q, k, v).backward(do), q, k, v requiring grad
   for fa.attention and SDPA (default choice, flash, cuDNN, math; a backend
   that cannot run the case prints n/a). At these sizes the GPU work is a few
   µs, so this is the host's cost per call.
2. fa's host time in layers (each includes the ones above it):
     C-ABI check      fa_attention_{forward,backward}_check through ctypes: the
                      runtime's GPU-free argument validation alone
     C-ABI launch     fa_attention_{forward,backward} through ctypes with the
                      argument struct, stream and buffers prepared once: the
                      runtime's whole launch (validation, pointer and stream
                      checks, tensor maps, workspaces, cuLaunchKernel)
     *_into           fa.forward_into / fa.backward_into with preallocated
                      outputs: + the Python plan lookup and struct fill-in
     fa.attention     + output allocation, dispatch (and autograd for fwd+bwd)
   and the differences: what the Python wrapper itself costs per call.
3. GPU µs per call, two ways:
     busy     CUDA events around `--calls` calls enqueued behind a
              torch.cuda._sleep long enough that the GPU never waits for the
              host: the device's own time per call (kernels, memsets and
              their gaps). A `?` marks a round where the host did not stay
              ahead (the sleep ended before the last call was queued).
     latency  events around one call on an idle, synchronised GPU: launch to
              completion, host launch cost included (what the older versions
              of this benchmark printed as "gpu µs").
4. torch.profiler over `--profile-calls` calls of each fa and SDPA case:
   per call, the GPU kernels (name, count, µs), memsets and memcpys, and the
   torch caching-allocator allocations (torch.cuda.memory_stats); the
   runtime's own stream-ordered workspaces (cuMemAllocAsync) are not torch
   allocations and show only as their memsets.
`--cprofile` adds cProfile's top entries of fa's fwd and fwd+bwd.
The last line, RESULT, gives the worst fa/SDPA-default ratios of host time
and of busy GPU time (goal: both <= 1.00).

    python3 bench/overhead.py --bundle out/bundle --lib <libfa_runtime.so> [--json out.json]
"""
import argparse
import contextlib
import cProfile
import ctypes
import io
import json
import os
import pstats
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fa  # noqa: E402
from fa import _runtime as rt  # noqa: E402

SDPA_BACKENDS = {"sdpa": None, "sdpa flash": SDPBackend.FLASH_ATTENTION,
                 "sdpa cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa math": SDPBackend.MATH}


def backend_scope(backend):
    return sdpa_kernel(backend) if backend is not None else contextlib.nullcontext()


def host_us(fn, calls, scope=contextlib.nullcontext):
    with scope():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / calls * 1e6


_cycles_per_us = None


def sleep_cycles_per_us():
    """torch.cuda._sleep's cycles per µs on this GPU, measured once."""
    global _cycles_per_us
    if _cycles_per_us is None:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 20_000_000
        torch.cuda._sleep(1000)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        _cycles_per_us = cycles / (start.elapsed_time(end) * 1e3)
    return _cycles_per_us


def gpu_busy_us(fn, calls, host_per_call, scope=contextlib.nullcontext):
    """(GPU µs per call with the host kept ahead, whether it stayed ahead)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    margin = 3.0
    for _ in range(4):
        with scope():
            torch.cuda.synchronize()
            torch.cuda._sleep(int((host_per_call * calls * margin + 500) * sleep_cycles_per_us()))
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            ahead = not start.query()  # the GPU is still in the sleep
            end.synchronize()
        if ahead:
            break
        margin *= 3
    return start.elapsed_time(end) * 1e3 / calls, ahead


def latency_us(fn, reps=30, scope=contextlib.nullcontext):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    with scope():
        for _ in range(reps):
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3)
    return statistics.median(samples)


def _device_time_us(evt):
    """A device event's own duration (its time range on the GPU)."""
    return evt.time_range.elapsed_us()


def gpu_activity(fn, calls, scope=contextlib.nullcontext):
    """Per call: kernels {name: (count, µs)}, memsets, memcpys and torch
    allocations of `calls` calls, from torch.profiler and memory_stats."""
    from torch.profiler import ProfilerActivity, profile
    with scope():
        fn()
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats().get("allocation.all.allocated", 0)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
        allocs = torch.cuda.memory_stats().get("allocation.all.allocated", 0) - before
    kernels, memsets, memcpys = {}, 0, 0
    for evt in prof.events():
        if str(getattr(evt, "device_type", "")).split(".")[-1] != "CUDA":
            continue
        name = evt.name
        low = name.lower()
        if "sync" in low:  # the profiler's records of synchronisations, not GPU work
            continue
        if "memset" in low:
            memsets += 1
            continue
        if "memcpy" in low:
            memcpys += 1
            continue
        count, us = kernels.get(name, (0, 0.0))
        kernels[name] = (count + 1, us + _device_time_us(evt))
    per_call = {name: (count / calls, us / count) for name, (count, us) in kernels.items()}
    return {"kernels": per_call, "kernel_launches": sum(c for c, _ in kernels.values()) / calls,
            "memsets": memsets / calls, "memcpys": memcpys / calls,
            "torch_allocations": allocs / calls}


def make_cases(bundle, shape, causal):
    """The callables of one shape: name -> (fn, scope factory)."""
    b, h, n, d = shape
    mk = lambda grad=False: torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16,  # noqa
                                        requires_grad=grad)
    q, k, v = mk(), mk(), mk()
    qg, kg, vg = mk(True), mk(True), mk(True)
    do = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)
    o = torch.empty_like(q)
    lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    delta = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
    dq_accum = torch.empty(b, h, n, d, device="cuda", dtype=torch.float32)
    none = contextlib.nullcontext
    mask = "causal" if causal else "none"
    cap = fa._capability(q)

    # The runtime through its C ABI alone: structs, kernel and stream made once.
    lib = bundle.lib
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    fwd_kernel = bundle.find(rt.FWD, q.dtype, d, d, mask, (-1, -1), cap, None, n)
    bwd_kernel = bundle.find(rt.BWD, q.dtype, d, d, mask, (-1, -1), cap, None, n)
    fwd_args = rt.ForwardArgs(*[fa._tensor(t) for t in (q, k, v, o, lse)], d ** -0.5)
    bwd_args = rt.BackwardArgs(*[fa._tensor(t) for t in (q, k, v, o, do, lse, dq, dk, dv,
                                                          delta, dq_accum)], d ** -0.5)
    fwd_ref, bwd_ref = ctypes.byref(fwd_args), ctypes.byref(bwd_args)
    fwd_check, bwd_check = lib.fa_attention_forward_check, lib.fa_attention_backward_check
    fwd_launch, bwd_launch = lib.fa_attention_forward, lib.fa_attention_backward
    rt.check(lib, fwd_launch(fwd_kernel, fwd_ref, stream))  # o, lse for the backward
    rt.check(lib, bwd_launch(bwd_kernel, bwd_ref, stream))

    cases = {
        "fa fwd": (lambda: _no_grad(fa.attention, q, k, v, causal), none),
        "fa fwd+bwd": (lambda: fa.attention(qg, kg, vg, causal=causal).backward(do), none),
        "C-ABI fwd check": (lambda: fwd_check(fwd_kernel, fwd_ref), none),
        "C-ABI fwd launch": (lambda: fwd_launch(fwd_kernel, fwd_ref, stream), none),
        "forward_into": (lambda: fa.forward_into(q, k, v, o, lse, causal=causal), none),
        "C-ABI bwd check": (lambda: bwd_check(bwd_kernel, bwd_ref), none),
        "C-ABI bwd launch": (lambda: bwd_launch(bwd_kernel, bwd_ref, stream), none),
        "backward_into": (lambda: fa.backward_into(q, k, v, o, do, lse, dq, dk, dv,
                                                   causal=causal), none),
        "torch.empty x2": (lambda: (torch.empty_like(o), torch.empty_like(lse)), none),
    }
    for name, backend in SDPA_BACKENDS.items():
        scope = lambda backend=backend: backend_scope(backend)  # noqa: E731
        cases[name + " fwd"] = (
            lambda: _no_grad(F.scaled_dot_product_attention, q, k, v, causal), scope)
        cases[name + " fwd+bwd"] = (
            lambda: F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal).backward(do),
            scope)
    kernels = {"fwd": bundle._info(fwd_kernel), "bwd": bundle._info(bwd_kernel)}
    return cases, kernels


def _no_grad(attention, q, k, v, causal):
    with torch.no_grad():
        if attention is fa.attention:
            return attention(q, k, v, causal=causal)
        return attention(q, k, v, is_causal=causal)


# The cases whose GPU time and activity are measured (the C-ABI ones launch
# the same kernels as forward_into / backward_into).
GPU_CASES = ["fa fwd", "sdpa fwd", "sdpa flash fwd", "sdpa cudnn fwd", "fa fwd+bwd",
             "sdpa fwd+bwd", "sdpa flash fwd+bwd", "sdpa cudnn fwd+bwd"]


def measure_shape(bundle, shape, causal, args):
    cases, kernels = make_cases(bundle, shape, causal)
    usable = {}
    for name, (fn, scope) in cases.items():  # warm-up: kernel loads, plans, autotuning
        try:
            with scope():
                for _ in range(5):
                    fn()
            torch.cuda.synchronize()
            usable[name] = (fn, scope)
        except RuntimeError as e:
            print("  (%s cannot run here: %s)" % (name, str(e).splitlines()[0][:100]))
    samples = {name: [] for name in usable}
    for _ in range(args.rounds):
        for name, (fn, scope) in usable.items():
            samples[name].append(host_us(fn, args.calls, scope))
    host = {name: statistics.median(s) for name, s in samples.items()}
    busy, latency, activity = {}, {}, {}
    for name in GPU_CASES:
        if name not in usable:
            continue
        fn, scope = usable[name]
        busy[name] = gpu_busy_us(fn, args.gpu_calls, host[name], scope)
        latency[name] = latency_us(fn, scope=scope)
        activity[name] = gpu_activity(fn, args.profile_calls, scope)
    return {"shape": "B%d H%d N%d d%d" % shape, "causal": causal, "host_us": host,
            "gpu_busy_us": {k: v[0] for k, v in busy.items()},
            "gpu_busy_host_ahead": {k: v[1] for k, v in busy.items()},
            "latency_us": latency, "activity": activity,
            "fa_kernels": {k: v["tag"] for k, v in kernels.items()},
            "fa_persistent_fwd": kernels["fwd"]["persistent_grid"],
            "fa_deterministic_bwd": kernels["bwd"]["deterministic"]}


def fmt(x, width=7):
    return ("%*.1f" % (width, x)) if x is not None else "%*s" % (width, "n/a")


def report(row):
    h, busy, lat = row["host_us"], row["gpu_busy_us"], row["latency_us"]
    ahead = row["gpu_busy_host_ahead"]
    g = lambda name: (fmt(busy.get(name)) + ("?" if name in ahead and not ahead[name]  # noqa
                                             else " "))
    print("\n== %s %s   fa fwd kernel %s%s, bwd kernel %s" % (
        row["shape"], "causal" if row["causal"] else "no mask", row["fa_kernels"]["fwd"],
        " (persistent)" if row["fa_persistent_fwd"] else "", row["fa_kernels"]["bwd"]))
    print("  %-14s %8s %8s | %10s %10s | %10s %10s" % (
        "µs per call", "host fwd", "fwd+bwd", "GPU busy", "fwd+bwd", "latency", "fwd+bwd"))
    for who in ["fa"] + list(SDPA_BACKENDS):
        f, fb = who + " fwd", who + " fwd+bwd"
        print("  %-14s %8s %8s | %10s %10s | %10s %10s" % (
            who if who != "fa" else "fa.attention", fmt(h.get(f), 8), fmt(h.get(fb), 8),
            g(f) if f in busy else "", g(fb) if fb in busy else "",
            fmt(lat.get(f), 10) if f in lat else "", fmt(lat.get(fb), 10) if fb in lat else ""))
    layers = [("C-ABI check", "C-ABI fwd check", "C-ABI bwd check"),
              ("C-ABI launch", "C-ABI fwd launch", "C-ABI bwd launch"),
              ("*_into", "forward_into", "backward_into"),
              ("fa.attention", "fa fwd", "fa fwd+bwd")]
    print("  fa host layers (µs):      fwd      bwd   (fa.attention's bwd column is fwd+bwd)")
    for label, f, b in layers:
        print("    %-18s %8s %8s" % (label, fmt(h.get(f), 8), fmt(h.get(b), 8)))

    def diff(a, b):
        return fmt(h[a] - h[b], 6) if a in h and b in h else "n/a"
    print("    Python wrapper: forward_into - C-ABI launch %s, fa.attention fwd - forward_into "
          "%s (torch.empty x2 alone %s); backward_into - C-ABI launch %s, fa fwd+bwd - "
          "fa fwd - backward_into %s" % (
              diff("forward_into", "C-ABI fwd launch"), diff("fa fwd", "forward_into"),
              fmt(h.get("torch.empty x2"), 5), diff("backward_into", "C-ABI bwd launch"),
              fmt(h["fa fwd+bwd"] - h["fa fwd"] - h["backward_into"], 6)
              if all(k in h for k in ("fa fwd+bwd", "fa fwd", "backward_into")) else "n/a"))
    print("  GPU activity per call (torch.profiler: launches per call x kernel, µs each; torch "
          "allocations from memory_stats):")
    for name, act in row["activity"].items():
        kern = ", ".join("%s%s %.1fµs" % ("%g× " % c if c != 1 else "", short(n), us)
                         for n, (c, us) in sorted(act["kernels"].items(), key=lambda x: -x[1][1]))
        print("    %-20s %4.1f kernels, %3.1f memsets, %3.1f memcpys, %3.1f torch allocs: %s" % (
            name, act["kernel_launches"], act["memsets"], act["memcpys"],
            act["torch_allocations"], kern))


def short(name, width=48):
    name = name.replace("void ", "")
    return name if len(name) <= width else name[:width - 1] + "…"


def profile_python(fn, calls, top):
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--calls", type=int, default=200, help="calls per host-time round")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--gpu-calls", type=int, default=100, help="calls per busy-GPU timing")
    ap.add_argument("--profile-calls", type=int, default=20)
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--cprofile", action="store_true")
    ap.add_argument("--profile", action="store_true", help="alias of --cprofile")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.zeros(1, device="cuda")
    bundle = fa.load(args.bundle, args.lib)
    print("torch %s, %s; host µs: median of %d rounds of %d calls; GPU busy: %d calls behind "
          "a sleep (%.0f sleep cycles/µs)" % (torch.__version__, torch.cuda.get_device_name(),
                                              args.rounds, args.calls, args.gpu_calls,
                                              sleep_cycles_per_us()))
    rows = []
    for d in [int(x) for x in args.dims.split(",")]:
        for causal in (False, True):
            row = measure_shape(bundle, (1, 8, 128, d), causal, args)
            report(row)
            rows.append(row)
            if (args.cprofile or args.profile) and d == 64 and not causal:
                cases, _ = make_cases(bundle, (1, 8, 128, d), causal)
                for name in ("fa fwd", "fa fwd+bwd"):
                    print("--- cProfile of %d calls of %s (tottime)" % (args.calls, name))
                    print(profile_python(cases[name][0], args.calls, 14))
    ratio = lambda table, a, b: max(r[table][a] / r[table][b] for r in rows  # noqa: E731
                                    if a in r[table] and b in r[table])
    print("\nRESULT: fa/SDPA (default backend) worst ratio per call: host fwd %.2f, host fwd+bwd "
          "%.2f, GPU busy fwd %.2f, GPU busy fwd+bwd %.2f (goal <= 1.00 each)" % (
              ratio("host_us", "fa fwd", "sdpa fwd"),
              ratio("host_us", "fa fwd+bwd", "sdpa fwd+bwd"),
              ratio("gpu_busy_us", "fa fwd", "sdpa fwd"),
              ratio("gpu_busy_us", "fa fwd+bwd", "sdpa fwd+bwd")))
    if args.json:
        for r in rows:
            for act in r["activity"].values():
                act["kernels"] = {n: {"per_call": c, "us": us} for n, (c, us) in
                                  act["kernels"].items()}
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
