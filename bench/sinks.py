#!/usr/bin/env python3
"""Attention sinks' cost: each sink kernel of the bundle against the plain
kernel of the same config (same tiles, same instructions), in one process,
on the same tensors, through direct runtime launches (no Python autograd in
the timing). Forward and backward (bwd_pre, bwd_sink, bwd, bwd_post against
bwd_pre, bwd, bwd_post) are timed with CUDA events over R launches each,
alternating plain and sink rounds so that clock drift hits both; the median
of the rounds' ratios is printed per config and shape (goal: within 2%).
Split-KV kernels with sinks (test/gpu/configs_splitkv_sinks.txt) are timed
on decode shapes (1 x 32 query heads on 8 key heads, Nq 1, --decode-nk keys)
against their plain split twins with the same split count: the split
forward and the merge (prediction: within 2%; the merge reads one more f32
per row).

Built on the development machine:
    build/bin/fa-aot --config-file test/gpu/configs_sinks.txt \
        --score-mods test/gpu/score_mods.mlir -o out/bundle-sinks
(configs_sinks.txt holds the plain twins of the benchmarked sink configs.)
    python3 bench/sinks.py --bundle out/bundle-sinks --lib <libfa_runtime.so>
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import fa  # noqa: E402
from fa import _tensor  # noqa: E402
from fa._runtime import BackwardArgs, ForwardArgs  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def twins(b):
    """(sink kernel, plain kernel, info) for every sink kernel whose plain
    twin (the tag without `_sink`) the bundle has."""
    handle = b._handles[0]
    by_tag = {}
    for i in range(b.lib.fa_bundle_kernel_count(handle)):
        k = b.lib.fa_bundle_kernel_at(handle, i)
        by_tag[b._info(k)["tag"]] = k
    out = []
    for tag, k in sorted(by_tag.items()):
        if tag.endswith("_sink") and tag[:-len("_sink")] in by_tag:
            out.append((k, by_tag[tag[:-len("_sink")]], b._info(k)))
    return out


def timed(fn, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


def bench(b, sink_k, plain_k, info, batch, n, heads, reps, rounds):
    dev = torch.device("cuda")
    dt = DTYPES[info["dtype"]]
    d, dv = info["head_dim"], info["head_dim_v"]
    q = torch.randn(batch, heads, n, d, device=dev, dtype=dt)
    k = torch.randn(batch, heads, n, d, device=dev, dtype=dt)
    v = torch.randn(batch, heads, n, dv, device=dev, dtype=dt)
    o = torch.empty(batch, heads, n, dv, device=dev, dtype=dt)
    lse = torch.empty(batch, heads, n, device=dev, dtype=torch.float32)
    sinks = torch.randn(heads, device=dev)
    scale = 1 / math.sqrt(d)
    stream = torch.cuda.current_stream().cuda_stream
    lib = b.lib
    s = _tensor(sinks)

    def check(status):
        if status:
            raise fa.FaError(status, lib.fa_last_error().decode())

    if info["direction"] == "fwd":
        args = ForwardArgs(*[_tensor(t) for t in (q, k, v, o, lse)], scale)
        plain = lambda: check(lib.fa_attention_forward(plain_k, ctypes.byref(args), stream))  # noqa: E731
        sink = lambda: check(lib.fa_attention_forward_sinks(  # noqa: E731
            sink_k, ctypes.byref(args), None, 0, ctypes.byref(s), stream))
    else:
        do = torch.randn_like(o)
        grads = [torch.empty_like(t) for t in (q, k, v)]
        delta = torch.empty(batch, heads, n, device=dev)
        accum = torch.empty(batch, heads, n, d, device=dev)
        ds = torch.empty(heads, device=dev)
        args = BackwardArgs(*[_tensor(t) for t in [q, k, v, o, do, lse] + grads +
                              [delta, accum]], scale)
        dst = _tensor(ds)
        plain = lambda: check(lib.fa_attention_backward(plain_k, ctypes.byref(args), stream))  # noqa: E731
        sink = lambda: check(lib.fa_attention_backward_sinks(  # noqa: E731
            sink_k, ctypes.byref(args), None, 0, ctypes.byref(s), ctypes.byref(dst), stream))
    plain(), sink()  # load the modules
    torch.cuda.synchronize()
    ratios, tp, ts = [], [], []
    for _ in range(rounds):
        a = timed(plain, reps)
        c = timed(sink, reps)
        tp.append(a), ts.append(c), ratios.append(c / a)
    return statistics.median(tp), statistics.median(ts), statistics.median(ratios)


def bench_decode(b, sink_k, plain_k, info, nk, reps, rounds, heads=32, kv_heads=8):
    """(plain ms, sink ms, median ratio, splits) of a split-KV decode step."""
    dev = torch.device("cuda")
    dt = DTYPES[info["dtype"]]
    d, dv = info["head_dim"], info["head_dim_v"]
    q = torch.randn(1, heads, 1, d, device=dev, dtype=dt)
    k = torch.randn(1, kv_heads, nk, d, device=dev, dtype=dt)
    v = torch.randn(1, kv_heads, nk, dv, device=dev, dtype=dt)
    o = torch.empty(1, heads, 1, dv, device=dev, dtype=dt)
    lse = torch.empty(1, heads, 1, device=dev, dtype=torch.float32)
    sinks = torch.randn(heads, device=dev)
    lib, stream = b.lib, torch.cuda.current_stream().cuda_stream

    def check(status):
        if status:
            raise fa.FaError(status, lib.fa_last_error().decode())

    splits, nbytes = ctypes.c_int32(), ctypes.c_uint64()
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    check(lib.fa_splitkv_choose_gqa(sink_k, 1, heads, kv_heads, 1, nk, sms,
                                    ctypes.byref(splits)))
    check(lib.fa_splitkv_workspace_bytes(sink_k, 1, heads, 1, splits, ctypes.byref(nbytes)))
    ws = torch.empty(nbytes.value, dtype=torch.uint8, device=dev)
    args = ForwardArgs(*[_tensor(t) for t in (q, k, v, o, lse)], 1 / math.sqrt(d))
    s = _tensor(sinks)
    plain = lambda: check(lib.fa_attention_forward_splitkv(  # noqa: E731
        plain_k, ctypes.byref(args), ws.data_ptr(), nbytes.value, splits, stream))
    sink = lambda: check(lib.fa_attention_forward_splitkv_sinks(  # noqa: E731
        sink_k, ctypes.byref(args), ws.data_ptr(), nbytes.value, splits, None, 0,
        ctypes.byref(s), stream))
    plain(), sink()
    torch.cuda.synchronize()
    ratios, tp, ts = [], [], []
    for _ in range(rounds):
        a = timed(plain, reps)
        c = timed(sink, reps)
        tp.append(a), ts.append(c), ratios.append(c / a)
    return statistics.median(tp), statistics.median(ts), statistics.median(ratios), splits.value


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bundle", required=True)
    p.add_argument("--lib", required=True)
    p.add_argument("--seqs", default="1024,4096,8192")
    p.add_argument("--tokens", type=int, default=16384, help="batch x N")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--decode-nk", default="4096,32768", help="keys of the split-KV decode")
    p.add_argument("--json")
    a = p.parse_args()
    b = fa.Bundle(a.bundle, lib_path=a.lib, jit=False)
    pairs = twins(b)
    if not pairs:
        sys.exit("no sink kernel with a plain twin in %s" % a.bundle)
    rows = []
    print("%-58s %6s %9s %9s %7s" % ("sink kernel", "N", "plain ms", "sink ms", "ratio"))
    for sink_k, plain_k, info in pairs:
        if info["split_kv"]:
            for nk in [int(x) for x in a.decode_nk.split(",")]:
                tp, ts, r, splits = bench_decode(b, sink_k, plain_k, info, nk, a.reps,
                                                 a.rounds)
                rows.append({"tag": info["tag"], "nk": nk, "splits": splits,
                             "plain_ms": tp, "sink_ms": ts, "ratio": r})
                print("%-58s %6d %9.3f %9.3f %7.3f  (decode, %d splits)"
                      % (info["tag"], nk, tp, ts, r, splits))
            continue
        for n in [int(x) for x in a.seqs.split(",")]:
            batch = max(a.tokens // n, 1)
            tp, ts, r = bench(b, sink_k, plain_k, info, batch, n, a.heads, a.reps, a.rounds)
            rows.append({"tag": info["tag"], "batch": batch, "n": n, "heads": a.heads,
                         "plain_ms": tp, "sink_ms": ts, "ratio": r})
            print("%-58s %6d %9.3f %9.3f %7.3f" % (info["tag"], n, tp, ts, r))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
