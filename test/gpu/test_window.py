#!/usr/bin/env python3
"""Differential GPU test of the run-time window kernels (H200 only, never CI).

A run-time window kernel (manifest "window_runtime", config `window` without
l/r) takes the window's sizes as its last two parameters: one kernel serves
every window. Each case draws a window per side from -1 (unbounded), 0,
sizes inside the rows, around Nq and Nk, and far past them (up to
2^31 - 1), and runs it through fa's Python API:
- the dense forward and backward (wgmma and mma.sync): test_attention's
  cases and judge (float64 reference, the flash-attn rule);
- the varlen forward: test_varlen's cases, every sequence under the window
  from its own bottom-right corner;
- the split-KV decode with packed GQA: test_packgqa's check over 1..16
  splits.
Then the choice: a kernel compiled for the exact window wins over the
run-time one when the bundle has both, fa_kernel_find returns one kernel
object per window (reporting its sizes), and a size below -1 is refused.

Built on the development machine (MLIR is not on the GPU machine):
    build/bin/fa-aot --config-file test/gpu/configs_window.txt -o out/bundle-window
Then, on the GPU machine:
    python3 test/gpu/test_window.py --bundle out/bundle-window --lib <libfa_runtime.so>
"""
import argparse
import ctypes
import json
import os
import random
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
import test_attention  # noqa: E402
import test_packgqa  # noqa: E402
import test_varlen  # noqa: E402


def random_side(rng, n):
    """One side's size: unbounded, zero, inside, around n, or far past it."""
    return rng.choice([-1, -1, 0, rng.randint(1, 64), rng.randint(1, max(1, n)),
                       n - 1, n, n + 1, 2 ** 31 - 1])


def random_window(rng, nq, nk):
    n = max(nq, nk)
    return (random_side(rng, n), random_side(rng, n))


def runtime_kernels(bundle):
    """The bundle's run-time window kernels (a compile-time window is >= 0)."""
    return [k for k in bundle.kernels() if k["mask"] == "window" and k["window_left"] < 0]


def dense_case(rng, kern, bwd_mma):
    cfg = dict(kern)
    case = test_attention.random_case(rng, cfg, bwd_mma)
    case["window"] = random_window(rng, case["nq"], case["nk"])
    return case, test_attention.run_case


def varlen_case(rng, kern, index, bundle):
    case = test_varlen.random_case(rng, kern, index)
    # flash-attn's window_size (-1, -1) is no window at all (mask none).
    window = (-1, -1)
    while window == (-1, -1):
        window = random_window(rng, max(case["lq"]), max(case["lk"]))
    case["window"] = window
    return case, lambda c, gen, dev: test_varlen.run_case(c, bundle, gen, dev)


def decode_case(rng, kern, bundle):
    """A packed split-KV decode step under a random window, through the view
    fa_kernel_find_packed_gqa returns for it."""
    hkv = rng.choice([1, 2, 8])
    h = hkv * rng.choice([1, 4, 8])
    nq, nk = rng.choice([1, 1, 4]), rng.choice([1, 63, 65, 1000, 4097, 16384])
    window = random_window(rng, nq, nk)
    splits = rng.choice([1, 2, 5, 16])
    case = {"tag": kern["tag"], "window": window, "h": h, "hkv": hkv, "nq": nq, "nk": nk,
            "splits": splits, "b": rng.randint(1, 3)}

    def run(c, gen, dev):
        handle = bundle.find_splitkv(kern["dtype"], kern["head_dim"], kern["head_dim_v"],
                                     "window", c["window"], 90, c["nk"], packed=True)
        view = dict(kern, handle=handle, window_left=c["window"][0],
                    window_right=c["window"][1])
        errs = test_packgqa.check_case(bundle, view, c["b"], c["h"], c["hkv"], c["nq"],
                                       c["nk"], c["splits"], rng.randint(0, 2 ** 30))[0]
        return [{"what": "decode o/lse", "ok": not errs, "message": errs}]
    return case, run


def check_choice(bundle, dev):
    """Exact before run-time; one view per window, with its sizes; bad sizes."""
    out = []
    lib = bundle.lib
    rt = [k for k in runtime_kernels(bundle) if k["direction"] == "fwd" and not k["varlen"]
          and not k["split_kv"]]
    exact = {(k["dtype"], k["head_dim"], k["window_left"], k["window_right"]): k
             for k in bundle.kernels() if k["mask"] == "window" and k["window_left"] >= 0 and
             k["direction"] == "fwd" and not k["split_kv"] and not k["varlen"]}
    for kern in rt:
        for (dt, d, left, right), twin in exact.items():
            if (dt, d) != (kern["dtype"], kern["head_dim"]) or twin["mma"] != kern["mma"]:
                continue
            got = bundle._info(bundle.find(0, dt, d, d, "window", (left, right), 90,
                                           mma=kern["mma"]))
            out.append({"what": "exact window (%d, %d) takes %s" % (left, right, twin["tag"]),
                        "ok": got["tag"] == twin["tag"]})
        a = bundle.find(0, kern["dtype"], kern["head_dim"], kern["head_dim_v"], "window",
                        (77, -1), 90, mma=kern["mma"])
        info = bundle._info(a)
        out.append({"what": "view of %s reports (77, -1)" % kern["tag"],
                    "ok": info["tag"] == kern["tag"] and
                    (info["window_left"], info["window_right"]) == (77, -1)})
        q = fa.KernelQuery(0, fa._dtype_code(kern["dtype"]), kern["head_dim"],
                           kern["head_dim_v"], 3, 77, -1, 90, fa._mma_code(kern["mma"]), None)
        first, again = ctypes.c_void_p(), ctypes.c_void_p()
        for out_ptr in (first, again):
            fa.check(lib, lib.fa_kernel_find(bundle._handles[0], ctypes.byref(q),
                                             ctypes.byref(out_ptr)))
        out.append({"what": "one view per window", "ok": first.value == again.value})
        q.window_left = -2
        status = lib.fa_kernel_find(bundle._handles[0], ctypes.byref(q), ctypes.byref(first))
        msg = lib.fa_last_error().decode()
        out.append({"what": "window -2 refused", "ok": status != 0 and "-1 for an unbounded"
                    in msg, "message": msg})
        break
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--cases", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    bundle = fa.load(args.bundle, args.lib)
    kernels = runtime_kernels(bundle)
    bwd = {(k["dtype"], k["head_dim"], k["mma"]) for k in kernels if k["direction"] == "bwd"}
    makers = []
    for k in kernels:
        if k["direction"] != "fwd":
            continue
        if k["varlen"]:
            makers.append(lambda rng, i, k=k: varlen_case(rng, k, i, bundle))
        elif k["split_kv"] and k["pack_gqa"]:
            makers.append(lambda rng, i, k=k: decode_case(rng, k, bundle))
        elif not k["split_kv"]:
            has_bwd = k["mma"] if (k["dtype"], k["head_dim"], k["mma"]) in bwd else None
            makers.append(lambda rng, i, k=k, b=has_bwd: dense_case(rng, k, b))
    if not makers:
        print("FAIL: the bundle has no run-time window forwards")
        return 1
    print("bundle %s: %d run-time window kernels, %d forward families" %
          (args.bundle, len(kernels), len(makers)))
    rng = random.Random(args.seed)
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    report, failures, t0 = {"cases": []}, 0, time.time()
    for i in range(max(args.cases, len(makers))):
        case, run = makers[i % len(makers)](rng, i)
        failures += not test_attention.record_case(report, i, case,
                                                   lambda: run(case, gen, dev))
    choice = check_choice(bundle, dev)
    for r in choice:
        failures += not r["ok"]
        print(("ok  " if r["ok"] else "FAIL") + " " + r["what"] +
              ("" if r["ok"] else " %s" % r.get("message", "")))
    report["choice"] = choice
    n = len(report["cases"])
    print("%d/%d window cases passed in %.0f s" % (n - sum(not c["ok"] for c in report["cases"]),
                                                  n, time.time() - t0))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
    print("RESULT: %s" % ("PASS" if failures == 0 else "FAIL"))
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
