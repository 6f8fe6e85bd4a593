#!/usr/bin/env python3
"""One benchmark shape run a few times, for a profiler (Nsight Compute) to pick
one launch of: bf16 (or fp8 e4m3 forward, --fp8), B·N tokens, hidden 2048, head dim --dim.

    ncu --kernel-name regex:'^fa_bwd_bwd' --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats \
        python3 bench/profile_case.py --bundle out/bundle --lib <libfa_runtime.so> --dir bwd

--docs N: a document mask of N random documents (bench/blocksparse.py's, --seed) over
the --seq tokens of each sequence, run block-sparse (a bundle with the
`maskmod=document:blocksparse` kernels and their mask builders).
"""
import argparse
import os
import random
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fa  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--dir", choices=["fwd", "bwd"], default="bwd")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--tokens", type=int, default=65536)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--iters", type=int, default=4)
    ap.add_argument("--mma", choices=["mma_sync", "wgmma"], default=None)
    ap.add_argument("--docs", type=int, default=0,
                    help="a block-sparse document mask of this many documents")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fp8", action="store_true",
                    help="the fp8 e4m3 forward (unit descales) instead of bf16")
    args = ap.parse_args()
    fa.load(args.bundle, args.lib)
    b, h, n, d = args.tokens // args.seq, 2048 // args.dim, args.seq, args.dim
    dev = torch.device("cuda")
    q, k, v, do = (torch.randn(b, h, n, d, device=dev, dtype=torch.bfloat16) for _ in range(4))
    o = torch.empty_like(q)
    lse = torch.empty(b, h, n, device=dev)
    dq, dk, dv = (torch.empty_like(q) for _ in range(3))
    if args.fp8:
        if args.dir != "fwd":
            ap.error("--fp8 profiles the forward only (--dir fwd)")
        q8, k8, v8 = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
        ones = torch.ones(b, h, device=dev)
    sparse = {}
    if args.docs:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from blocksparse import document_ids
        doc = document_ids(n, args.docs, random.Random(args.seed), dev).repeat(b, 1)
        sparse = dict(mod_args=[doc], block_mask=fa.block_mask("document", b, h, n, n,
                                                               mod_args=[doc], head_dim=d))
    for _ in range(args.iters):
        if sparse:
            fa.forward_into(q, k, v, o, lse, **sparse)
            if args.dir == "bwd":
                fa.backward_into(q, k, v, o, do, lse, dq, dk, dv, **sparse)
            continue
        if args.fp8:
            fa.forward_fp8_into(q8, k8, v8, o, lse, (ones, ones, ones), causal=args.causal)
            continue
        fa.forward_into(q, k, v, o, lse, causal=args.causal, mma=args.mma)
        if args.dir == "bwd":
            fa.backward_into(q, k, v, o, do, lse, dq, dk, dv, causal=args.causal, mma=args.mma)
    torch.cuda.synchronize()
    print("ran %s b=%d h=%d n=%d d=%d causal=%s x%d" % (args.dir, b, h, n, d, args.causal,
                                                      args.iters))


if __name__ == "__main__":
    main()
