#!/usr/bin/env python3
"""Issue 18's model case: attention on [B, N, H, D] projections.

q, k, v come from [B, N, H, D] buffers as x.view(B, N, H, D).transpose(1, 2)
([B, H, N, D] views, unit last stride). Times, in one process on the same
tensors (GPU time, median of rounds):
  fa strided     fa.attention on the views (no copy; O in q's layout)
  fa copies      .contiguous() of q, k, v, then fa.attention (what fa needed
                 before strided kernels), and O transposed back to [B, N, H, D]
  fa contiguous  fa.attention on contiguous [B, H, N, D] copies made beforehand
                 (the kernel alone: the goal is strided within 3% of it)
  cuDNN          SDPA's cuDNN backend on the views
and the same four as forward + backward (o.backward(dO); fa strided reads the
views and writes dQ, dK, dV in their layouts, no copy), and checks that fa
strided's O equals fa contiguous's bit for bit.

    python3 bench/strided.py --bundle out/bundle --lib <libfa_runtime.so>
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from decode import median_us  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--shape", default="8,4096,16,128", help="B,N,H,D")
    ap.add_argument("--causal", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1,
                    help="then time strided and contiguous alternately this many more times "
                         "and print the ratio of each pair (the GPU's drift between runs is "
                         "larger than the 3%% goal)")
    args = ap.parse_args()
    b, n, h, d = (int(x) for x in args.shape.split(","))
    causal = bool(args.causal)
    bundle = fa.load(args.bundle, args.lib)
    torch.manual_seed(0)
    x = [torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    q, k, v = (t.transpose(1, 2) for t in x)
    qc, kc, vc = (t.contiguous() for t in (q, k, v))

    def strided():
        return fa.attention(q, k, v, causal=causal, bundle=bundle)

    def copies():
        o = fa.attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=causal,
                         bundle=bundle)
        return o.transpose(1, 2).contiguous()

    def contiguous():
        return fa.attention(qc, kc, vc, causal=causal, bundle=bundle)

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    o_s, o_c = strided(), contiguous()
    same = torch.equal(o_s.contiguous(), o_c)
    flops = 4 * b * h * n * n * d * (0.5 if causal else 1.0)
    print("B%d N%d H%d d%d %s, bf16, from [B,N,H,D]: O strides %s, equal to contiguous: %s"
          % (b, n, h, d, "causal" if causal else "none", o_s.stride(), same))
    for name, fn in (("fa strided", strided), ("fa copies", copies),
                     ("fa contiguous", contiguous), ("cuDNN", cudnn)):
        us = median_us(fn, reps=20)
        print("%-14s %9.1f us  %6.1f TFLOP/s" % (name, us, flops / us / 1e6), flush=True)
    # Forward + backward (3.5x the forward's FLOPs) from leaves of each layout.
    do = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)
    leaves = {"views": [t.detach().requires_grad_() for t in (q, k, v)],
              "contiguous": [t.detach().requires_grad_() for t in (qc, kc, vc)]}

    def train(kind, copy=False):
        def step():
            lq, lk, lv = leaves[kind]
            if copy:
                lq, lk, lv = lq.contiguous(), lk.contiguous(), lv.contiguous()
            fa.attention(lq, lk, lv, causal=causal, bundle=bundle).backward(do)
        return step

    def cudnn_train():
        lq, lk, lv = leaves["views"]
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            F.scaled_dot_product_attention(lq, lk, lv, is_causal=causal).backward(do)

    for name, fn in (("fa strided", train("views")), ("fa copies", train("views", True)),
                     ("fa contiguous", train("contiguous")), ("cuDNN", cudnn_train)):
        us = median_us(fn, reps=10)
        print("fwd+bwd %-14s %9.1f us  %6.1f TFLOP/s" % (name, us, 3.5 * flops / us / 1e6),
              flush=True)
    if args.repeat > 1:
        repeat_pairs(strided, contiguous, train("views"), train("contiguous"), args.repeat)
    grads = [t.grad.stride() == t.stride() for t in leaves["views"]]
    print("fwd+bwd: dQ, dK, dV in the views' layouts: %s" % all(grads))
    return 0 if same and all(grads) else 1


def repeat_pairs(strided, contiguous, strided_train, contiguous_train, repeat):
    """strided/contiguous time ratios of `repeat` back-to-back pairs, forward
    and forward + backward, each pair's order alternating."""
    for label, pair, reps in (("fwd", (strided, contiguous), 20),
                              ("fwd+bwd", (strided_train, contiguous_train), 10)):
        ratios = []
        for r in range(repeat):
            order = pair if r % 2 == 0 else pair[::-1]
            times = {fn: median_us(fn, reps=reps, rounds=3) for fn in order}
            ratios.append(times[pair[0]] / times[pair[1]])
        ratios.sort()
        print("%s strided/contiguous over %d pairs: median %.3f, min %.3f, max %.3f" %
              (label, repeat, ratios[len(ratios) // 2], ratios[0], ratios[-1]), flush=True)


if __name__ == "__main__":
    sys.exit(main())
