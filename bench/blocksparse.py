#!/usr/bin/env python3
"""Block-sparse attention on the GPU (issue 15's speed lines): a document mask of
--docs random documents over --tokens tokens (bf16, d128, B 1, --heads heads),
in the same process:
  fa block-sparse   fa.forward_into(block_mask=) over the blocks the mask lists
  fa dense mask_mod the mask_mod kernel that visits every key block
  fa dense          the maskless wgmma forward (no mask at all): the TFLOP/s
                    the block-sparse kernel should keep over its computed blocks
  flex              torch.compile'd flex_attention with create_block_mask (built
                    outside the timing)
TFLOP/s count 4·B·H·D per visible (q, kv) pair forward (2.5x backward) for the
masked runs, and over the computed blocks (full + partial, 128 x 128 each) as
"blk" for fa block-sparse; the dense kernel counts every pair. Also the block
mask build time (BlockMask.rebuild: its two kernels) against one block-sparse
forward, and the whole fa.block_mask call (lookup, allocation, build). The
backward rows time the mask_mod backward (fa has no block-sparse backward yet)
against flex's.

    python3 bench/blocksparse.py --bundle out/bundle-blocksparse --lib <libfa_runtime.so>
        [--variant NAME=BUNDLE ...]   (A/B: another bundle's block-sparse kernels, same process)
"""
import argparse
import os
import random
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import fa  # noqa: E402
from bench import graph_us, time_interleaved  # noqa: E402


def document_ids(n, docs, rng, dev, align=1):
    # align > 1: documents start at multiples of align (no partial blocks
    # when align is the block size).
    cuts = sorted(align * c for c in rng.sample(range(1, -(-n // align)), docs - 1))
    ids = torch.zeros(n, dtype=torch.int32)
    for c in cuts:
        ids[c:] += 1
    return ids.view(1, n).to(dev)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--docs", type=int, default=8)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--align", type=int, default=1,
                    help="documents start at multiples of this (128: no partial blocks)")
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=BUNDLE",
                    help="A/B: the block-sparse forward and backward of another bundle, "
                         "with its own block masks, timed in the same process")
    args = ap.parse_args()
    dev = torch.device("cuda")
    bundle = fa.load(args.bundle, args.lib, jit=False)
    n, h, d, b = args.tokens, args.heads, 128, 1
    rng = random.Random(args.seed)
    doc = document_ids(n, args.docs, rng, dev, args.align)
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    q, k, v, do = (torch.randn(b, h, n, d, generator=gen, device=dev, dtype=torch.bfloat16)
                   for _ in range(4))
    o = torch.empty_like(q)
    lse = torch.empty(b, h, n, device=dev, dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    bm = fa.block_mask("document", b, h, n, n, mod_args=[doc], head_dim=d, bundle=bundle)
    torch.cuda.synchronize()
    partial, full = bm.counts()
    blocks = int(partial.sum() + full.sum())
    nb = -(-n // 128)
    lengths = torch.bincount(doc.view(-1).long())
    pairs = int((lengths.double() ** 2).sum())
    print("document mask: %d tokens, %d documents (lengths %s), %d heads" % (
        n, args.docs, lengths.tolist(), h))
    print("blocks computed: %d of %d (%d full, %d partial); visible pairs %.1f%%" % (
        blocks, nb * nb, int(full.sum()), int(partial.sum()), 100.0 * pairs / (n * n)))

    # The forward's mask alone (its rebuild: the two kernels), and bm with
    # the backward's mask too (built on bm's first backward; rebuild() then
    # rebuilds both, as a training step with new documents needs).
    bm_fwd = fa.block_mask("document", b, h, n, n, mod_args=[doc], head_dim=d, bundle=bundle)
    fa.backward_into(q, k, v, o, do, lse, dq, dk, dv, mod_args=[doc], block_mask=bm,
                     bundle=bundle)
    sparse_bwd = bm.backward_mask(dev) is not None

    def build_call():
        fa.block_mask("document", b, h, n, n, mod_args=[doc], head_dim=d, bundle=bundle)

    fns = {
        "fa block-sparse fwd": lambda: fa.forward_into(q, k, v, o, lse, mod_args=[doc],
                                                       block_mask=bm, bundle=bundle),
        "fa dense mask_mod fwd": lambda: fa.forward_into(q, k, v, o, lse, mask_mod="document",
                                                         mod_args=[doc], bundle=bundle,
                                                         mma="wgmma"),
        "fa dense fwd": lambda: fa.forward_into(q, k, v, o, lse, bundle=bundle, mma="wgmma"),
        # The build on the GPU (its two kernels, one runtime call): what the
        # < 5% goal counts. fa.block_mask adds a lookup and an allocation on
        # the host, which can outlast the kernels.
        "fa block mask build": bm_fwd.rebuild,
        "fa block masks fwd+bwd": bm.rebuild,
        "fa.block_mask call": build_call,
        "fa block-sparse bwd": lambda: fa.backward_into(q, k, v, o, do, lse, dq, dk, dv,
                                                        mod_args=[doc], block_mask=bm,
                                                        bundle=bundle),
        "fa mask_mod bwd": lambda: fa.backward_into(q, k, v, o, do, lse, dq, dk, dv,
                                                    mask_mod="document", mod_args=[doc],
                                                    bundle=bundle, mma="wgmma"),
        "fa dense bwd": lambda: fa.backward_into(q, k, v, o, do, lse, dq, dk, dv,
                                                 bundle=bundle, mma="wgmma"),
    }
    for spec in args.variant:
        name, _, path = spec.partition("=")
        if not name or not path:
            ap.error("--variant expects NAME=BUNDLE, got %r" % spec)
        other = fa.Bundle(path, args.lib, jit=False)
        bm_other = fa.block_mask("document", b, h, n, n, mod_args=[doc], head_dim=d,
                                 bundle=other)
        fns[name + " block-sparse fwd"] = (
            lambda bm_=bm_other, b_=other: fa.forward_into(q, k, v, o, lse, mod_args=[doc],
                                                         block_mask=bm_, bundle=b_))
        fns[name + " block-sparse bwd"] = (
            lambda bm_=bm_other, b_=other: fa.backward_into(q, k, v, o, do, lse, dq, dk, dv,
                                                          mod_args=[doc], block_mask=bm_,
                                                          bundle=b_))
    if not args.no_flex:
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            ids = doc.view(-1)

            def doc_mask(b_, h_, q_, kv_):
                return ids[q_] == ids[kv_]

            flex_bm = create_block_mask(doc_mask, None, None, n, n, device="cuda")
            flex = torch.compile(flex_attention, dynamic=False)
            qf, kf, vf = (t.detach().clone().requires_grad_() for t in (q, k, v))
            fns["flex fwd"] = lambda: flex(q, k, v, block_mask=flex_bm)
            out_f = flex(qf, kf, vf, block_mask=flex_bm)

            def flex_bwd():
                torch.autograd.grad(out_f, (qf, kf, vf), do, retain_graph=True)
            fns["flex bwd"] = flex_bwd
        except Exception as e:  # noqa: BLE001
            fns["flex fwd"] = fns["flex bwd"] = {"error": str(e).splitlines()[0][:200]}
    # Milliseconds per call, or the error dict of a callable that failed.
    ms = {name: t.get("ms", t) for name, t in time_interleaved(fns, runs=7, budget_ms=20000).items()}

    def tflops(name, flop):
        t = ms.get(name)
        if not isinstance(t, (int, float)):
            return "   n/a (%s)" % (t.get("error", "?") if isinstance(t, dict) else t)
        return "%7.1f" % (flop / (t * 1e-3) / 1e12)

    fwd_pairs, blk_pairs, dense_pairs = 4.0 * b * h * d * pairs, \
        4.0 * b * h * d * blocks * 128 * 128, 4.0 * b * h * d * n * n
    print("%-24s %10s %14s %14s" % ("", "ms", "TFLOP/s mask", "TFLOP/s blk"))
    for name in fns:
        t = ms.get(name)
        tt = "%10.3f" % t if isinstance(t, (int, float)) else "%10s" % "n/a"
        scale = 2.5 if "bwd" in name else 1.0
        if "dense" in name and "mask_mod" not in name:
            row = (tflops(name, scale * dense_pairs), "")
        elif "build" in name or "call" in name or "masks" in name:
            row = ("", "")
        else:
            row = (tflops(name, scale * fwd_pairs),
                   tflops(name, scale * blk_pairs) if "block-sparse" in name else "")
        print("%-24s %s %14s %14s" % (name, tt, row[0], row[1]))

    def ratio(x, y):
        a, c = ms.get(x), ms.get(y)
        if isinstance(a, (int, float)) and isinstance(c, (int, float)):
            return "%.2f" % (c / a)
        return "n/a"
    t_sparse = ms.get("fa block-sparse fwd")
    t_dense = ms.get("fa dense fwd")
    if isinstance(t_sparse, (int, float)) and isinstance(t_dense, (int, float)):
        print("block-sparse TFLOP/s over computed blocks / dense TFLOP/s: %.2f (target >= 0.9)"
              % ((blk_pairs / t_sparse) / (dense_pairs / t_dense)))
    print("fwd: fa block-sparse is %sx flex (target >= 1.3); %sx fa dense mask_mod" % (
        ratio("fa block-sparse fwd", "flex fwd"),
        ratio("fa block-sparse fwd", "fa dense mask_mod fwd")))
    print("bwd: fa block-sparse bwd%s is %sx flex (target >= 1.3); %sx fa mask_mod bwd" % (
        "" if sparse_bwd else " (NO block-sparse backward in the bundle: the mask_mod one)",
        ratio("fa block-sparse bwd", "flex bwd"),
        ratio("fa block-sparse bwd", "fa mask_mod bwd")))
    # The build's GPU time alone (a CUDA graph of rebuilds: no host time).
    t_build = graph_us(bm_fwd.rebuild) / 1000.0
    if isinstance(t_sparse, (int, float)):
        print("block mask build (GPU time, graph): %.3f ms = %.1f%% of one block-sparse forward "
              "(target < 5%%); with the backward's mask %.3f ms" % (
                  t_build, 100.0 * t_build / t_sparse, graph_us(bm.rebuild) / 1000.0))


if __name__ == "__main__":
    main()
