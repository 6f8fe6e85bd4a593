#!/usr/bin/env python3
"""Varlen prefill (issue 16): B sequences of random lengths packed along the
token axis, causal and not, bf16. Times, in one process on the same tokens
(GPU time, median of rounds), and reports TFLOP/s over the computed tokens
(4·H·D·L² per sequence, half of it under the causal mask):
  fa varlen        fa.varlen.forward_into, one launch for the batch
                   (check_seqlens=False, as flash-attn; "+check" adds the
                   host copy and check of cu_seqlens)
  fa per sequence  fa.attention on each sequence's contiguous [1,H,L,D]
  fa dense         fa.attention on [B', H, L', D] of equal lengths, B'·L'
                   the same total (the rate the issue holds varlen to: within 5%)
  SDPA flash       per sequence (PyTorch's FlashAttention-2 backend)
  flash-attn       flash_attn_varlen_func, where flash_attn is installed
and checks fa varlen's O against fa per sequence. With --sinks (the bundle
list holding configs_varlen_sinks.txt's kernels too), also fa varlen +sinks:
the varlen kernels with attention sinks on the same tokens (forward and
backward), against the plain ones. Where the bundle has the
varlen backward (wgmma or mma.sync), also the backward (2.5x the forward's FLOPs):
fa varlen bwd (fa.varlen.backward_into) against fa dense bwd (the dense
bundle's, wgmma on sm_90) over the same equal-length tokens.

    python3 bench/varlen.py --bundle out/bundle-varlen --dense-bundle out/bundle --lib <so>
"""
import argparse
import os
import random
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from fa import varlen  # noqa: E402
from decode import median_us  # noqa: E402


def lengths(seed, total, lo, hi):
    """Random lengths in [lo, hi] summing to `total` (the last one trimmed)."""
    rng = random.Random(seed)
    out = []
    while sum(out) < total:
        out.append(min(rng.randint(lo, hi), total - sum(out)))
    if out[-1] < lo and len(out) > 1:
        out[-2] += out.pop()
    return out


def run(bundle, lens, h, d, causal, reps, compare=None, with_sinks=False):
    dev, dt = "cuda", torch.bfloat16
    total = sum(lens)
    cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(len(lens))], dtype=torch.int32,
                      device=dev)
    q, k, v = (torch.randn(total, h, d, device=dev, dtype=dt) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(h, total, device=dev, dtype=torch.float32)
    longest = max(lens)
    kw = {"causal": True} if causal else {}
    if causal and not any(k["varlen"] and k["mask"] == "causal_bottom_right" and
                          k["dtype"] == "bf16" and k["head_dim"] == d
                          for k in bundle.kernels()):
        kw = {"causal_top_left": True}  # equal lengths: the same mask

    sinks = torch.randn(h, device=dev) if with_sinks else None
    o_sinks, lse_sinks = torch.empty_like(o), torch.empty_like(lse)

    def fa_varlen(check=False, other=None):
        varlen.forward_into(q, k, v, o, lse, cu, cu, longest, longest, bundle=other or bundle,
                            check_seqlens=check, **kw)
        return o

    def fa_varlen_sinks():
        varlen.forward_into(q, k, v, o_sinks, lse_sinks, cu, cu, longest, longest,
                            bundle=bundle, check_seqlens=False, sinks=sinks, **kw)

    starts = cu.tolist()
    seqs = [[t[starts[i]:starts[i + 1]].transpose(0, 1).unsqueeze(0).contiguous()
             for t in (q, k, v)] for i in range(len(lens))]

    def fa_per_sequence():
        return [fa.attention(*s, causal=causal, bundle=bundle) for s in seqs]

    mean = max(128, (total // len(lens)) // 128 * 128)
    dense = [torch.randn(max(1, total // mean), h, mean, d, device=dev, dtype=dt)
             for _ in range(3)]

    def fa_dense():
        return fa.attention(*dense, causal=causal, bundle=bundle)

    def sdpa_per_sequence():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return [F.scaled_dot_product_attention(*s, is_causal=causal) for s in seqs]

    timed = [("fa varlen", fa_varlen), ("fa varlen +check", lambda: fa_varlen(True)),
             ("fa per sequence", fa_per_sequence), ("SDPA flash", sdpa_per_sequence)]
    if compare is not None:  # another build's varlen kernels, same process
        timed.insert(1, ("fa varlen compare", lambda: fa_varlen(other=compare)))
    if with_sinks:
        timed.insert(1, ("fa varlen +sinks", fa_varlen_sinks))
    try:
        from flash_attn import flash_attn_varlen_func
        timed.append(("flash-attn varlen", lambda: flash_attn_varlen_func(
            q, k, v, cu, cu, longest, longest, causal=causal)))
    except ImportError:
        pass
    # Correctness first: varlen's O against the per-sequence dense kernels
    # (SDPA's where the dense bundle lacks them).
    fa_varlen(True)
    try:
        per = fa_per_sequence()
        reference = "fa per sequence"
    except fa.FaError as e:
        print("  (fa dense kernels unavailable: %s)" % str(e).splitlines()[0])
        timed = [t for t in timed if t[0] != "fa per sequence"]
        fa_dense = None
        per = sdpa_per_sequence()
        reference = "SDPA flash"
    err = max((o[starts[i]:starts[i + 1]].float() - per[i][0].transpose(0, 1).float())
              .abs().max().item() for i in range(len(lens)) if lens[i])
    flops = sum(4.0 * h * d * n * n * (0.5 if causal else 1.0) for n in lens)
    dense_flops = 4.0 * dense[0].shape[0] * h * d * mean * mean * (0.5 if causal else 1.0)
    print("%s: %d sequences, %d tokens (lengths %d..%d), H%d d%d bf16; max |varlen - %s| = "
          "%.3g" % ("causal" if causal else "none", len(lens), total, min(lens), longest, h, d,
                    reference, err))
    rates = {}
    for name, fn in timed:
        us = median_us(fn, reps=reps)
        rates[name] = flops / us / 1e6
        print("  %-18s %9.1f us  %6.1f TFLOP/s" % (name, us, rates[name]), flush=True)
    if fa_dense is not None:
        us = median_us(fa_dense, reps=reps)
        rates["fa dense"] = dense_flops / us / 1e6
        print("  %-18s %9.1f us  %6.1f TFLOP/s  ([%d,%d,%d,%d], equal lengths)"
              % ("fa dense", us, rates["fa dense"], dense[0].shape[0], h, mean, d), flush=True)
    for other in ("fa varlen compare", "fa dense", "fa per sequence", "SDPA flash",
                  "flash-attn varlen"):
        if other in rates:
            print("  fa varlen / %s = %.3f" % (other, rates["fa varlen"] / rates[other]))
    if with_sinks:
        print("  fa varlen +sinks / fa varlen = %.3f"
              % (rates["fa varlen +sinks"] / rates["fa varlen"]))
    if any(k["varlen"] and k["direction"] == "bwd" for k in bundle.kernels()):
        time_backward(bundle, q, k, v, o, lse, cu, longest, kw, flops, dense, dense_flops,
                      causal, reps, (sinks, o_sinks, lse_sinks) if with_sinks else None,
                      compare)
    return err


def time_backward(bundle, q, k, v, o, lse, cu, longest, kw, flops, dense, dense_flops,
                  causal, reps, with_sinks=None, compare=None):
    """The varlen backward against the dense one on the same token count
    (and, `with_sinks` = (sinks, O, LSE) of their forward, the backward with
    sinks against the plain one; `compare`, another bundle's varlen backward,
    timed first and against it)."""
    do = torch.randn_like(o)
    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))

    def fa_varlen_bwd(sinks=None, o=o, lse=lse, other=None):
        varlen.backward_into(q, k, v, o, do, lse, dq, dk, dv, cu, cu, longest,
                             bundle=other or bundle, equal_lengths=True, sinks=sinks, **kw)
    compare_rate = None
    if compare is not None:
        us = median_us(lambda: fa_varlen_bwd(other=compare), reps=reps)
        compare_rate = 2.5 * flops / us / 1e6
        print("  %-18s %9.1f us  %6.1f TFLOP/s" % ("compare varlen bwd", us, compare_rate))
    us = median_us(fa_varlen_bwd, reps=reps)
    varlen_rate = 2.5 * flops / us / 1e6
    print("  %-18s %9.1f us  %6.1f TFLOP/s" % ("fa varlen bwd", us, varlen_rate), flush=True)
    if compare_rate is not None:
        print("  fa varlen bwd / compare varlen bwd = %.3f" % (varlen_rate / compare_rate))
    if with_sinks is not None:
        sinks, o_sinks, lse_sinks = with_sinks
        us = median_us(lambda: fa_varlen_bwd(sinks, o_sinks, lse_sinks), reps=reps)
        rate = 2.5 * flops / us / 1e6
        print("  %-18s %9.1f us  %6.1f TFLOP/s" % ("fa varlen bwd +sinks", us, rate))
        print("  fa varlen bwd +sinks / fa varlen bwd = %.3f" % (rate / varlen_rate), flush=True)
    try:
        od, lsed = fa.attention(*dense, causal=causal, return_lse=True, bundle=bundle)
        dod = torch.randn_like(od)
        grads = [torch.empty_like(t) for t in dense]
        fn = lambda: fa.backward_into(*dense, od, dod, lsed, *grads,  # noqa: E731
                                      causal=causal, bundle=bundle)
        us = median_us(fn, reps=reps)
    except fa.FaError as e:
        print("  (fa dense backward unavailable: %s)" % str(e).splitlines()[0])
        return
    dense_rate = 2.5 * dense_flops / us / 1e6
    print("  %-18s %9.1f us  %6.1f TFLOP/s" % ("fa dense bwd", us, dense_rate), flush=True)
    print("  fa varlen bwd / fa dense bwd = %.3f" % (varlen_rate / dense_rate))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", default=os.environ.get("FA_VARLEN_BUNDLE", "out/bundle-varlen"))
    ap.add_argument("--dense-bundle", default="out/bundle")
    ap.add_argument("--lib", default=None)
    ap.add_argument("--tokens", type=int, default=65536)
    ap.add_argument("--min-len", type=int, default=100)
    ap.add_argument("--max-len", type=int, default=8192)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dims", default="128,64")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compare", default=None,
                    help="another varlen bundle (an A/B of its kernels against --bundle's, "
                         "in this process: forward and backward)")
    ap.add_argument("--sinks", action="store_true",
                    help="also time the varlen kernels with attention sinks (the bundle list "
                         "must hold them: --bundle out/bundle-varlen,out/bundle-varlen-sinks)")
    a = ap.parse_args()
    dirs = a.bundle.split(",") + ([a.dense_bundle] if os.path.exists(
        os.path.join(a.dense_bundle, "manifest.json")) else [])
    bundle = fa.Bundle(dirs, lib_path=a.lib, jit=False)
    compare = fa.Bundle([a.compare] + dirs[1:], lib_path=a.lib, jit=False) if a.compare else None
    torch.manual_seed(a.seed)
    lens = lengths(a.seed, a.tokens, a.min_len, a.max_len)
    worst = 0.0
    for d in (int(x) for x in a.dims.split(",")):
        for causal in (False, True):
            worst = max(worst, run(bundle, lens, a.heads, d, causal, a.reps, compare,
                                   a.sinks))
    # bf16 outputs of two kernels of one algorithm: a few ulps of |O| < 4.
    sys.exit(0 if worst < 0.05 else "varlen differs from the per-sequence kernels")


if __name__ == "__main__":
    main()
