#!/usr/bin/env python3
"""A small representative fa launch for compute-sanitizer (memcheck,
racecheck): for each head dim of the bundle (wgmma, then bf16 first), one GQA case with
ragged Nq != Nk through forward and backward, and one case with more query
tiles than SMs on a persistent-grid forward; outputs NaN-poisoned first.
Exits 1 if a launch fails or leaves an output unwritten.

    compute-sanitizer --tool memcheck --error-exitcode 9 \
        python3 test/gpu/sanitize_case.py --bundle out/bundle --lib <libfa_runtime.so>
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import fa  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None)
    args = ap.parse_args()
    bundle = fa.load(args.bundle, args.lib)
    kernels = bundle.kernels()
    bwd = {(k["dtype"], k["head_dim"], k["mask"]) for k in kernels if k["direction"] == "bwd"}
    # Prefer a mask with partial tiles (bottom-right causal), then any.
    order = {"causal_bottom_right": 0, "causal": 1, "window": 2, "none": 3}
    picked = {}
    for k in sorted((k for k in kernels if k["direction"] == "fwd"),
                    key=lambda k: (k["mma"] != "wgmma", k["dtype"] != "bf16",
                                   order[k["mask"]])):
        picked.setdefault(k["head_dim"], k)
    cases = [(k, (1, 4, 2, 70, 131)) for _, k in sorted(picked.items())]
    # A persistent grid's CTAs each take several tiles: more tiles than SMs;
    # 1050 keys leave a narrow last key tile (26 of 128, 90 of 192 keys).
    persistent = [k for k in kernels if k.get("persistent_grid")]
    if persistent:
        cases.append((persistent[0], (2, 8, 4, 1100, 1050)))
    dev = torch.device("cuda")
    bad = 0
    for k, (B, H, Hkv, Nq, Nk) in cases:
        d, dv = k["head_dim"], k["head_dim_v"]
        dt = torch.bfloat16 if k["dtype"] == "bf16" else torch.float16
        kw = {"causal": k["mask"] == "causal",
              "causal_bottom_right": k["mask"] == "causal_bottom_right",
              "window": (k["window_left"], k["window_right"]) if k["mask"] == "window" else None}
        q = torch.randn(B, H, Nq, d, device=dev, dtype=dt)
        kk = torch.randn(B, Hkv, Nk, d, device=dev, dtype=dt)
        v = torch.randn(B, Hkv, Nk, dv, device=dev, dtype=dt)
        o = torch.full((B, H, Nq, dv), float("nan"), device=dev, dtype=dt)
        lse = torch.full((B, H, Nq), float("nan"), device=dev)
        fa.forward_into(q, kk, v, o, lse, mma=k["mma"], **kw)
        outs = [o]
        if (k["dtype"], d, k["mask"]) in bwd:
            do = torch.randn_like(o)
            dq, dk, dvv = (torch.full_like(t, float("nan")) for t in (q, kk, v))
            fa.backward_into(q, kk, v, o, do, lse, dq, dk, dvv, **kw)
            outs += [dq, dk, dvv]
        torch.cuda.synchronize()
        nan = any(torch.isnan(t).any().item() for t in outs)
        print("%s d=%d %s mask=%s: %s" % (k["tag"], d, k["dtype"], k["mask"],
                                          "NaN left in an output" if nan else "ok"))
        bad += nan
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
