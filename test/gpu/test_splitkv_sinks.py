#!/usr/bin/env python3
"""Differential GPU test of split-KV decode with attention sinks (H200 only).

Every split-KV kernel with sinks of the bundle (packed GQA or not) is launched
through fa_attention_forward_splitkv_sinks on decode cases: B 1-2, GQA groups
1/4/8 (packed kernels: group > 1), Nq 1-4, Nk 1..64k (ragged, fewer keys than
splits, one key), split counts 1..64, sinks drawn from N(0, 2), dominant (+8)
and -inf, and rows no key reaches (causal_bottom_right with Nq > Nk: only the
sink sees them, O = 0 and LSE = sink). Reference: test_sinks.reference in
float64, and the same math in the inputs' dtype for the flash-attn rule
max|fa - ref64| <= 2 * max|same dtype - ref64| + 1e-5 (LSE: + lse_slack).
Outputs and workspace are NaN-poisoned first. Also: the plain split launch
refuses a sink kernel, and fa.attention(q, k, v, sinks=t) on a decode shape
takes the split kernel and agrees with the direct launch.
Every launch is followed by torch.cuda.synchronize() under a per-step alarm,
so a hang is named and stops the run.

Built on the development machine:
    build/bin/fa-aot --config-file test/gpu/configs_splitkv_sinks.txt -o out/x/splitkv-sinks
On the GPU machine:
    python3 test/gpu/test_splitkv_sinks.py --bundle out/x/splitkv-sinks --lib build/lib/libfa_runtime.so
"""
import argparse
import ctypes
import os
import random
import signal
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from fa import _tensor  # noqa: E402
from fa._runtime import ForwardArgs, check  # noqa: E402
from test_attention import allowed_mask, lse_slack, poisoned  # noqa: E402
from test_sinks import random_sinks, reference  # noqa: E402


class StepTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise StepTimeout("step timed out (hang?)")


def step(seconds, what, fn):
    """fn() with a synchronize after it, under an alarm of `seconds`."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        r = fn()
        torch.cuda.synchronize()
        return r
    except StepTimeout:
        print("HANG: %s" % what, flush=True)
        os._exit(3)
    finally:
        signal.alarm(0)


def launch(b, kernel, q, k, v, sinks, splits, scale):
    o = poisoned(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
    lse = poisoned(*q.shape[:-1], dtype=torch.float32, device=q.device)
    nbytes = ctypes.c_uint64()
    check(b.lib, b.lib.fa_splitkv_workspace_bytes(kernel, q.shape[0], q.shape[1],
                                                     q.shape[2], splits, ctypes.byref(nbytes)))
    ws = torch.full((nbytes.value // 4,), float("nan"), dtype=torch.float32, device=q.device)
    args = ForwardArgs(*[_tensor(t) for t in (q, k, v, o, lse)], scale)
    s = _tensor(sinks)
    status = b.lib.fa_attention_forward_splitkv_sinks(
        kernel, ctypes.byref(args), ws.data_ptr(), nbytes.value, splits, None, 0,
        ctypes.byref(s), torch.cuda.current_stream().cuda_stream)
    if status:
        raise fa.FaError(status, b.lib.fa_last_error().decode())
    return o, lse


def judge(o, lse, o64, lse64, o_lo, lse_lo, slack):
    errs = []
    if torch.isnan(o).any() or torch.isnan(lse).any():
        errs.append("NaN in O or LSE (unwritten rows?)")
    e_o = (o.double() - o64).abs().max().item()
    t_o = 2 * (o_lo.double() - o64).abs().max().item() + 1e-5
    seen = torch.isfinite(lse64)
    e_l = (lse.double()[seen] - lse64[seen]).abs().max().item() if seen.any() else 0.0
    t_l = (2 * (lse_lo.double()[seen] - lse64[seen]).abs().max().item() + 1e-5 + slack
           if seen.any() else 1e-5)
    if not (torch.isneginf(lse[~seen]).all()):
        errs.append("rows without keys or sink must give LSE = -inf")
    if not e_o <= t_o:
        errs.append("O error %.3g > %.3g" % (e_o, t_o))
    if not e_l <= t_l:
        errs.append("LSE error %.3g > %.3g" % (e_l, t_l))
    return errs


def cases(rng, info, n):
    group_choices = [4, 8] if info["pack_gqa"] else [1, 4, 8]
    nks = [1, 7, 64, 300, 1000, 4096, 65536]
    for i in range(n):
        g = rng.choice(group_choices)
        hkv = rng.choice([1, 2, 4])
        nk = nks[i % len(nks)] if i < len(nks) else rng.randint(1, 20000)
        nq = rng.choice([1, 1, 2, 4])
        if info["mask"] == "causal_bottom_right" and i % 5 == 4:
            nk = rng.randint(1, 3)
            nq = nk + rng.randint(1, 3)  # rows above the diagonal: only the sink
        splits = rng.choice([1, 2, 3, 8, 16, 64])
        yield dict(b=rng.randint(1, 2), h=hkv * g, hkv=hkv, nq=nq, nk=nk, splits=splits,
                   scale=rng.choice([None, 1.3]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", default="out/x/splitkv-sinks")
    ap.add_argument("--lib", required=True)
    ap.add_argument("--cases", type=int, default=24, help="cases per kernel")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--timeout", type=int, default=60, help="seconds per step")
    a = ap.parse_args()
    b = fa.Bundle(a.bundle, lib_path=a.lib, jit=False)
    handle = b._handles[0]
    kernels = [b.lib.fa_bundle_kernel_at(handle, i)
               for i in range(b.lib.fa_bundle_kernel_count(handle))]
    kernels = [(k, b._info(k)) for k in kernels]
    kernels = [(k, i) for k, i in kernels if i["split_kv"] and i["sinks"]]
    if not kernels:
        print("FAIL: no split-KV kernel with sinks in %s" % a.bundle)
        return 1
    rng = random.Random(a.seed)
    dev = torch.device("cuda")
    failed = passed = 0
    for kernel, info in kernels:
        dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[info["dtype"]]
        for c in cases(rng, info, a.cases):
            gen = torch.Generator(device="cuda").manual_seed(rng.randint(0, 1 << 30))
            mk = lambda h, n, d: torch.randn(c["b"], h, n, d, device=dev, dtype=dtype,  # noqa: E731
                                             generator=gen)
            q = mk(c["h"], c["nq"], info["head_dim"])
            k = mk(c["hkv"], c["nk"], info["head_dim"])
            v = mk(c["hkv"], c["nk"], info["head_dim_v"])
            sinks = random_sinks(rng, c["h"], dev)
            scale = c["scale"] or info["head_dim"] ** -0.5
            what = "%s %s" % (info["tag"], c)
            try:
                o, lse = step(a.timeout, what,
                              lambda: launch(b, kernel, q, k, v, sinks, c["splits"], scale))
            except fa.FaError as e:
                failed += 1
                print("FAIL %s: %s" % (what, e))
                continue
            allowed = allowed_mask(info["mask"], (info["window_left"], info["window_right"]),
                                   c["nq"], c["nk"], dev)
            o64, lse64 = reference(q.double(), k.double(), v.double(), sinks.double(),
                                   allowed, scale)
            o_lo, lse_lo = reference(q, k, v, sinks.to(dtype), allowed, scale)
            errs = judge(o, lse, o64, lse64, o_lo, lse_lo, lse_slack(q, k, lse64, scale))
            if errs:
                failed += 1
                print("FAIL %s: %s" % (what, "; ".join(errs)))
            else:
                passed += 1
        # The plain split launch must refuse a kernel with sinks (its merge
        # would read an unset sinks parameter).
        q = torch.zeros(1, 8, 1, info["head_dim"], device=dev, dtype=dtype)
        k = torch.zeros(1, 2 if info["pack_gqa"] else 8, 64, info["head_dim"], device=dev,
                        dtype=dtype)
        v = torch.zeros(*k.shape[:-1], info["head_dim_v"], device=dev, dtype=dtype)
        o = torch.zeros(1, 8, 1, info["head_dim_v"], device=dev, dtype=dtype)
        lse = torch.zeros(1, 8, 1, device=dev)
        ws = torch.zeros(1 << 20, dtype=torch.uint8, device=dev)
        args = ForwardArgs(*[_tensor(t) for t in (q, k, v, o, lse)], 1.0)
        if b.lib.fa_attention_forward_splitkv_check(kernel, ctypes.byref(args), ws.data_ptr(),
                                                    ws.numel(), 1) == 0:
            failed += 1
            print("FAIL %s: the plain split launch accepted a kernel with sinks" % info["tag"])
        else:
            passed += 1
    # fa.attention(sinks=t) on a decode shape: the split kernel (packed GQA
    # where the bundle has it), agreeing with float64 by the same rule.
    q = torch.randn(1, 32, 1, 128, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, 8, 8192, 128, device=dev, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    sinks = random_sinks(rng, 32, dev)
    o = step(a.timeout, "fa.attention(sinks=t) decode",
             lambda: fa.attention(q, k, v, sinks=sinks, bundle=b))
    allowed = allowed_mask("none", (-1, -1), 1, 8192, dev)
    o64, _ = reference(q.double(), k.double(), v.double(), sinks.double(), allowed,
                       128 ** -0.5)
    o_lo, _ = reference(q, k, v, sinks.to(q.dtype), allowed, 128 ** -0.5)
    e = (o.double() - o64).abs().max().item()
    t = 2 * (o_lo.double() - o64).abs().max().item() + 1e-5
    if e <= t:
        passed += 1
    else:
        failed += 1
        print("FAIL fa.attention(sinks=t) decode: O error %.3g > %.3g" % (e, t))
    print("split-KV sinks: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
